// Command kube-scheduler is the upstream Kubernetes kube-scheduler, built from the k8s.io/kubernetes module at the version
// pinned in ../go.mod: the same code as kubernetes/cmd/kube-scheduler (its command executed with os.Args).
// Used by the locally built kind node image (e2e/kind_image.py).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
