// Command kubeadm is the upstream kubeadm, built from the k8s.io/kubernetes module at the version pinned in
// ../go.mod: the same code as kubernetes/cmd/kubeadm. It goes into the locally built kind node image
// (e2e/kind_image.py), where kind runs it to bootstrap each node.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	utilerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() {
	utilerrors.HandleError(app.Run())
}
