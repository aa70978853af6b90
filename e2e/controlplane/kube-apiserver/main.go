// Command kube-apiserver is the upstream Kubernetes API server, built from the k8s.io/kubernetes
// module at the version pinned in go.mod. It is the same code path as kubernetes/cmd/kube-apiserver:
// app.NewAPIServerCommand() executed with os.Args. Used by the test harness (harness/controlplane.py).
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zone support, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	// cobra reads os.Args[1:]; cli.Run adds upstream's flag normalisation and log flushing.
	os.Exit(cli.Run(command))
}
