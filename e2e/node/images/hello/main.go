// Command hello is the node smoke test's workload. With no arguments: a static HTTP server on :8080
// answering "hello from <hostname>" (the pod name), so a test can tell which pod behind a Service
// answered. `hello apiserver PATH`: GET PATH from the API server the way an in-cluster client does
// (KUBERNETES_SERVICE_HOST/PORT, the pod's ServiceAccount token and CA) and print the status and body.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if len(os.Args) == 3 && os.Args[1] == "apiserver" {
		os.Exit(apiserver(os.Args[2]))
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func apiserver(path string) int {
	token, err := os.ReadFile(saDir + "token")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ca, err := os.ReadFile(saDir + "ca.crt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addr := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d\n%s\n", resp.StatusCode, body)
	return 0
}
