/*
 * The lab's pod sandbox ("pause") process: holds a pod's namespaces, reaps orphaned children
 * (it is PID 1 of the pod when the pod shares its PID namespace) and exits cleanly on SIGINT or
 * SIGTERM. Compiled statically by the lab (`gcc -static`) into the lab's pause image, so no
 * registry is needed.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
    if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) ||
        sigaction(SIGCHLD, &child, NULL)) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
