// Command htpasswd prints one htpasswd line, "<user>:<bcrypt hash>", for the lab registry's
// htpasswd authentication (the only hash the distribution registry accepts is bcrypt).
//
//	htpasswd USER PASSWORD
package main

import (
	"fmt"
	"os"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: htpasswd USER PASSWORD")
		os.Exit(2)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(os.Args[2]), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "htpasswd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], h)
}
