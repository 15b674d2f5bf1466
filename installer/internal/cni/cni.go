// Package cni is `ichor-installer cni`: the ichor-cni Job's command, which
// hands Cilium over from Talos's inline manifest to the Helm release cilium
// in kube-system and upgrades it later (contracts/pkg/cilium Apply).
//
//	ichor-installer cni apply --request /etc/ichor-cni/request.json --timeout 10m
//	ichor-installer cni apply --request request.json --kubeconfig ~/.kube/config
package cni

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
)

// DefaultTimeout is how long apply waits for Cilium's rollout when
// --timeout is not given.
const DefaultTimeout = 10 * time.Minute

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

const usage = "usage: ichor-installer cni apply --request FILE [--timeout DURATION] [--kubeconfig FILE]"

// Main runs `ichor-installer cni <args>`: the log goes to stdout; a failure
// is one line on stderr and exit code ExitFail, bad usage ExitUsage with a
// line that says what was wrong and how to fix it.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "apply" {
		what := "no subcommand"
		if len(args) > 0 {
			what = fmt.Sprintf("unknown subcommand %q", args[0])
		}
		_, _ = fmt.Fprintf(stderr, "ichor-installer cni: %s; the only one is apply\n%s\n", what, usage)
		return ExitUsage
	}

	fs := flag.NewFlagSet("ichor-installer cni apply", flag.ContinueOnError)
	fs.SetOutput(stderr)
	request := fs.String("request", "", "The JSON Cilium request to apply (the key "+cilium.RequestKey+" of the ichor-cni Job's ConfigMap).")
	timeout := fs.Duration("timeout", DefaultTimeout, "How long to wait for Cilium's DaemonSet and Deployments to roll out (and as long again for a rollback).")
	kubeconfig := fs.String("kubeconfig", "", "A kubeconfig to reach the cluster with; empty means the pod's ServiceAccount (in a Job), else $KUBECONFIG.")

	if err := fs.Parse(args[1:]); err != nil {
		_, _ = fmt.Fprintln(stderr, usage)
		return ExitUsage
	}

	switch {
	case fs.NArg() > 0:
		return usageError(stderr, "unexpected argument %q: every input is a flag", fs.Arg(0))
	case *request == "":
		return usageError(stderr, "--request FILE is required: the JSON Cilium request (%s of the ichor-cni Job's ConfigMap)", cilium.RequestKey)
	case *timeout <= 0:
		return usageError(stderr, "--timeout %s must be positive (e.g. --timeout 10m)", *timeout)
	}

	data, err := os.ReadFile(*request)
	if err != nil {
		return usageError(stderr, "--request: %v", err)
	}

	req, err := cilium.DecodeRequest(data)
	if err != nil {
		return usageError(stderr, "--request %s: %v", *request, err)
	}

	cfg, err := RESTConfig(*kubeconfig)
	if err != nil {
		return usageError(stderr, "%v", err)
	}

	start := time.Now()

	applied, err := cilium.Apply(ctx, cfg, req, *timeout, stdout)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "ichor-installer cni apply: %s (after %s)\n", oneLine(err), time.Since(start).Round(time.Second))
		return ExitFail
	}

	_, _ = fmt.Fprintf(stdout, "cilium %s: %s, revision %d, values sha256 %s (after %s)\n",
		applied.Version, applied.Action, applied.Revision, applied.ValuesSHA256, time.Since(start).Round(time.Second))

	return ExitOK
}

func usageError(stderr io.Writer, format string, args ...any) int {
	_, _ = fmt.Fprintf(stderr, "ichor-installer cni apply: %s\n%s\n", fmt.Sprintf(format, args...), usage)
	return ExitUsage
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// RESTConfig is the kubeconfig given, else the pod's ServiceAccount, else
// $KUBECONFIG or ~/.kube/config (talosemu's pod runner gives a pod
// KUBECONFIG, as a process cannot have the in-cluster token path).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}

	cfg, inCluster := rest.InClusterConfig()
	if inCluster == nil {
		return cfg, nil
	}

	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no pod ServiceAccount (%w) and no kubeconfig (%w): run it in the ichor-cni Job, or pass --kubeconfig FILE", inCluster, err)
	}

	return cfg, nil
}
