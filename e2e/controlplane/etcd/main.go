// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3/etcdmain) at the version
// k8s.io/kubernetes pins for the kube-apiserver in ../kube-apiserver. Used by harness/controlplane.py.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
