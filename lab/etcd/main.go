// etcd for the lab's control plane, built from etcd's own Go module (go.etcd.io/etcd/server/v3).
// This wrapper exists only because etcd's main package lives in a module whose go.mod replaces
// its siblings with relative paths; etcdmain.Main is the whole of etcd's upstream main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
