//! A web server for lab containers, for load-balancer targets: busybox `httpd` serving
//! - `/` — the container's name on one line (so a client can tell which target answered);
//! - `/cgi-bin/stream` — the container's name, then `tick N` every 200 ms for two minutes (a
//!   long-lived connection whose target the client knows).

/// The CGI script behind `/cgi-bin/stream`.
pub const STREAM_CGI: &str = "#!/bin/sh\necho 'Content-Type: text/plain'\necho\ncat /www/index.html\ni=0\nwhile [ $i -lt 600 ]; do echo \"tick $i\"; i=$((i+1)); sleep 0.2; done\n";

/// The command of a container `name` serving HTTP on `port` (see the module docs).
pub fn httpd_command(name: &str, port: u16) -> Vec<String> {
    let script = format!(
        "mkdir -p /www/cgi-bin && echo {name} > /www/index.html && printf '%s' \"$STREAM\" > /www/cgi-bin/stream && chmod 755 /www/cgi-bin/stream && exec httpd -f -p {port} -h /www"
    );
    vec![
        "env".into(),
        format!("STREAM={STREAM_CGI}"),
        "sh".into(),
        "-c".into(),
        script,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_writes_the_name_and_serves_the_port() {
        let c = httpd_command("c7", 8080);
        assert_eq!(&c[2..4], ["sh", "-c"]);
        assert!(c[4].contains("echo c7 > /www/index.html"), "{}", c[4]);
        assert!(c[4].ends_with("exec httpd -f -p 8080 -h /www"), "{}", c[4]);
        assert!(c[1].starts_with("STREAM=#!/bin/sh\n"));
    }
}
