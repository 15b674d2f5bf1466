// Command ichor-installer is the Job image that installs and upgrades Ichor
// in the cluster it manages: it applies its own RBAC, checks that the CRD
// changes are additive, snapshots what runs, applies the CRDs, the
// controller and ichor-ui, waits for each, runs post-checks, rolls back from
// the snapshot on failure, and writes the IchorInstallation's status
// (contracts/pkg/installer, shared with `ichor upgrade ichor --local`). Its log is what a person reads; it exits
// non-zero when the install failed, so the Job fails.
//
//	ichor-installer                                 # in a Job: the pod's ServiceAccount
//	ichor-installer --kubeconfig ~/.kube/config     # from outside the cluster
//
// `ichor-installer cni apply` is the ichor-cni Job's command: it hands
// Cilium over to its Helm release and upgrades it (installer/internal/cni).
//
//	ichor-installer cni apply --request /etc/ichor-cni/request.json --timeout 10m
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installer"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/installer/internal/cni"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "cni" {
		return runCNI(args[1:])
	}

	fs := flag.NewFlagSet("ichor-installer", flag.ContinueOnError)
	showVersion := fs.Bool("version", false, "Print the version and exit.")
	kubeconfig := fs.String("kubeconfig", "", "A kubeconfig to reach the cluster with; empty means the pod's ServiceAccount (in a Job), else $KUBECONFIG.")
	namespace := fs.String("namespace", install.Namespace, "The namespace Ichor runs in.")
	manifest := fs.String("manifest", "", "A multi-document YAML install manifest to install instead of the one embedded in this build.")
	waitTimeout := fs.Duration("wait-timeout", installer.DefaultWaitTimeout, "How long to wait for each Deployment to be available, and for the post-checks.")
	crdTimeout := fs.Duration("crd-timeout", installer.DefaultCRDTimeout, "How long to wait for the CRDs to be Established.")
	uiURL := fs.String("ui-url", "", "The https URL browsers reach ichor-ui at: install ichor-ui as the issuer of Ichor's own users there, and record it "+
		"(a later run without this flag keeps the recorded one).")
	skipRefusal := fs.Bool("skip-webhook-refusal-check", false,
		"Leave out the post-check that the admission webhook refuses a dry-run object (the webhook Service's endpoints are still checked); "+
			"for a world whose pods are simulated.")

	if err := fs.Parse(args); err != nil {
		return 2
	}

	if *showVersion {
		fmt.Println(version.Get())

		return 0
	}

	// client-go logs through klog; the installer's log is its own lines.
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())

	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ichor-installer: %v\n", err)

		return 2
	}

	o := installer.Options{
		Config: cfg, Namespace: *namespace, Version: version.Get().Version,
		WaitTimeout: *waitTimeout, CRDTimeout: *crdTimeout, SkipWebhookRefusal: *skipRefusal, UIURL: *uiURL,
		Log: os.Stdout,
	}

	if *manifest != "" {
		data, err := os.ReadFile(*manifest)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ichor-installer: --manifest: %v\n", err)

			return 2
		}

		o.Manifest, o.ManifestSource = data, *manifest
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()

	if err := installer.Run(ctx, o); err != nil {
		fmt.Printf("ichor-installer: %v (after %s)\n", err, time.Since(start).Round(time.Second))

		return 1
	}

	return 0
}

// runCNI runs `ichor-installer cni …` (installer/internal/cni).
func runCNI(args []string) int {
	// client-go and Helm log through klog; the command's log is its own lines.
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	return cni.Main(ctx, args, os.Stdout, os.Stderr)
}

// restConfig is the kubeconfig given, else the pod's ServiceAccount, else
// $KUBECONFIG or ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}

		return cfg, nil
	}

	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}

	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("not in a pod, and no kubeconfig: pass --kubeconfig (%w)", err)
	}

	return cfg, nil
}
