// Command ichor-controller is the only component of Ichor that writes to Talos
// nodes. This is its entry point: a controller-runtime manager with leader
// election, health probes and metrics. Reconcilers and admission webhooks are
// registered in one place below as they are added.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/controller/internal/certs"
	"github.com/maeshinshin/ichor/controller/internal/controller/autopatch"
	"github.com/maeshinshin/ichor/controller/internal/controller/clusterstatus"
	"github.com/maeshinshin/ichor/controller/internal/controller/cnihandover"
	"github.com/maeshinshin/ichor/controller/internal/controller/cnistatus"
	"github.com/maeshinshin/ichor/controller/internal/controller/credentialrequest"
	"github.com/maeshinshin/ichor/controller/internal/controller/discovery"
	"github.com/maeshinshin/ichor/controller/internal/controller/etcdbackup"
	"github.com/maeshinshin/ichor/controller/internal/controller/helminstall"
	"github.com/maeshinshin/ichor/controller/internal/controller/impersonation"
	"github.com/maeshinshin/ichor/controller/internal/controller/kubeletcsr"
	"github.com/maeshinshin/ichor/controller/internal/controller/kubernetesupgrade"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/machinereclaim"
	"github.com/maeshinshin/ichor/controller/internal/controller/netpolicy"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/controller/selfdeploy"
	"github.com/maeshinshin/ichor/controller/internal/controller/servingca"
	"github.com/maeshinshin/ichor/controller/internal/controller/storagestatus"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosupgrade"
	"github.com/maeshinshin/ichor/controller/internal/controller/teardown"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/leader"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichormetrics "github.com/maeshinshin/ichor/controller/internal/metrics"
	"github.com/maeshinshin/ichor/controller/internal/selftrust"
	"github.com/maeshinshin/ichor/controller/internal/webhook"
)

// The controller removes its own finalizers, which the webhooks gate with the
// override verb (architecture, "Git, override and recovery").
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=override
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ichor-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// The metrics endpoint authenticates and authorizes its callers through the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// leaderElectionID names the Lease the replicas compete for.
const leaderElectionID = "ichor-controller.ichor.maesh.dev"

func main() {
	var (
		metricsAddr    string
		metricsCertDir string
		probeAddr      string
		pprofAddr      string
		leaderElection bool
		showVersion    bool
		webhookPort    int
		webhookHost    string
		webhookCertDir string
		enableWebhooks bool
		manageCerts    bool
		namespace      string
		releaseSource  string
		k8sSource      string
		ownNode        string
		selfTrustFile  string
		certOpts       certs.Options
		impersonate    stringList
		deployManager  string
		machineWorkers int
		lookRate       float64
		talosReuse     time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080",
		"Address the HTTPS metrics endpoint binds to (bearer token and get on /metrics required: the ClusterRole ichor-metrics-reader); \"0\" disables it.")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "",
		"Directory holding tls.crt and tls.key of the metrics endpoint; empty (or no files there) serves a self-signed certificate made at start.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health probe endpoint binds to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "",
		"Address Go's pprof endpoints (/debug/pprof/, plain HTTP, no authentication) bind to, for profiling; empty (the default) serves none. Bind it to loopback only.")
	flag.IntVar(&machineWorkers, "machine-workers", machinestate.DefaultWorkers,
		"How many machines the configuration and lifecycle reconcilers each work on at once (their steps wait on the nodes, not the CPU).")
	flag.Float64Var(&lookRate, "machine-look-rate", machinestate.DefaultLookRate,
		"How many idle looks at machines (a Talos dial each: health, drift) the lifecycle and configuration reconcilers each make per second, all machines together; "+
			"a machine is looked at every 30 s (health) and 5 min (drift), or less often when the fleet is too large for that at this rate.")
	flag.DurationVar(&talosReuse, "talos-connection-reuse", 30*time.Minute,
		"How long the lifecycle and configuration reconcilers keep a connection to a node's Talos API for their next looks (one TLS handshake per machine per period "+
			"instead of one per look); a connection whose call failed unavailable or timed out is dropped at once. Its client certificates live twice as long. 0: a connection per look.")
	flag.BoolVar(&leaderElection, "leader-elect", true, "Elect a leader so that only one replica reconciles at a time.")
	flag.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	flag.BoolVar(&enableWebhooks, "enable-webhooks", true, "Serve the admission webhooks.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the admission webhook server listens on.")
	flag.StringVar(&webhookHost, "webhook-bind-address", "",
		"Host (IP address) the admission webhook server listens on; empty means every address. The manifest passes the pod's IP (the downward API's status.podIP).")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"Directory holding tls.crt and tls.key of the webhook server.")
	flag.BoolVar(&manageCerts, "manage-webhook-certs", true,
		"Keep the webhook serving certificate in a Secret and the caBundle of the webhook configuration up to date.")
	flag.StringVar(&namespace, "namespace", envOr("POD_NAMESPACE", "ichor-system"), "Namespace Ichor runs in.")
	flag.StringVar(&releaseSource, "release-source", "",
		"Image Factory whose /versions lists the Talos releases offered as upgrade candidates; empty means each cluster's spec.registry.imageFactoryURL, else https://factory.talos.dev.")
	flag.StringVar(&k8sSource, "kubernetes-release-source", "",
		"Registry whose tags of siderolabs/kubelet list the Kubernetes releases offered as upgrade candidates (the OCI tag list); empty means https://ghcr.io.")
	flag.StringVar(&ownNode, "own-node", envOr("NODE_NAME", ""),
		"The Kubernetes Node this controller runs on (the downward API's spec.nodeName): a cluster shutdown sends it its Shutdown last; empty outside the cluster.")
	flag.StringVar(&selfTrustFile, "self-trust-file", "",
		"File keeping the Kubernetes CAs a CA rotation of the cluster the controller runs in adds to its own client's trust, across a container restart (an emptyDir); empty keeps them in memory only.")
	flag.StringVar(&certOpts.SecretName, "webhook-secret", "ichor-webhook-tls", "Secret holding the webhook CA and serving certificate.")
	flag.StringVar(&certOpts.ServiceName, "webhook-service", "ichor-webhook", "Service the API server reaches the webhooks through.")
	flag.StringVar(&certOpts.WebhookConfiguration, "webhook-configuration", "ichor-validating-webhook",
		"ValidatingWebhookConfiguration whose caBundle is kept.")
	flag.StringVar(&certOpts.MutatingWebhookConfiguration, "mutating-webhook-configuration", "ichor-mutating-webhook",
		"MutatingWebhookConfiguration whose caBundle is kept.")
	flag.Var(&impersonate, "impersonate-user",
		"A user name beyond the IchorUsers that ichor-ui may impersonate, ichor:<name> or oidc:<name> (repeatable; the chart's ichorUI.impersonation.users).")
	flag.StringVar(&deployManager, "deployment-manager", "",
		"helm: this controller was installed by the Helm chart, so it creates the IchorInstallation (spec.deployment.manager helm) when there is none "+
			"and keeps its version at this release; empty: the installer or `ichor init` records the installation.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	if showVersion {
		fmt.Println(version.Get())
		return
	}
	if deployManager != "" && deployManager != ichorv1alpha1.ManagerHelm {
		fmt.Fprintf(os.Stderr, "--deployment-manager %q: the only value is %s (the Helm chart passes it), or leave the flag out\n", deployManager, ichorv1alpha1.ManagerHelm)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		log.Error(err, "building the scheme")
		os.Exit(1)
	}
	if err := ichorv1alpha1.AddToScheme(scheme); err != nil {
		log.Error(err, "building the scheme")
		os.Exit(1)
	}

	// The controller's own client trusts its CA file as the kubelet refreshes
	// it, plus what a CA rotation of this cluster adds ahead of the switch.
	cfg, selfTrust, err := selftrust.Wrap(ctrl.GetConfigOrDie(), selfTrustFile)
	if err != nil {
		log.Error(err, "configuring the Kubernetes client's trust")
		os.Exit(1)
	}
	// The certificate code reads webhook configurations and Secrets directly:
	// the controller may not list or watch those, so a cached client would wait
	// for a cache that never syncs.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		log.Error(err, "creating a client")
		os.Exit(1)
	}
	if enableWebhooks && manageCerts {
		certOpts.Namespace, certOpts.CertDir = namespace, webhookCertDir
		if err := certs.Ensure(context.Background(), direct, certOpts); err != nil {
			log.Error(err, "preparing the webhook serving certificate")
			os.Exit(1)
		}
	}
	mgrOpts := ctrl.Options{
		Scheme:  scheme,
		Metrics: ichormetrics.ServerOptions(metricsAddr, metricsCertDir),
		// The lock Leases are read from the cache, in Ichor's namespace only,
		// where the controller's Role lets it list and watch them.
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{lock.DefaultNamespace: {}}},
			},
			// Nothing reads who wrote which field: the cache keeps objects
			// without their managed fields, a large share of each object's
			// memory and of every copy made from the cache. Writes are
			// unaffected (a patch or an update never sends them back empty:
			// the API server ignores an update's missing managedFields).
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		LeaderElection:         leaderElection,
		LeaderElectionID:       leaderElectionID,
		// The Lease lives in Ichor's namespace; outside a cluster (a local
		// process, the e2e tests) there is no service account file to read it from.
		LeaderElectionNamespace: namespace,
		WebhookServer:           ctrlwebhook.NewServer(ctrlwebhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir}),
	}
	// The Lease is renewed every 5 s, not every 2 s (internal/leader).
	leader.Apply(&mgrOpts)
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		log.Error(err, "creating the manager")
		os.Exit(1)
	}
	// Every Talos call of every reconciler is counted and timed.
	talos.SetInterceptors(ichormetrics.TalosInterceptors())
	// What the objects say (machines, operations, the lock, certificates,
	// discovery), computed from the cache at scrape time.
	if err := ichormetrics.Register(mgr.GetCache(), lock.DefaultNamespace); err != nil {
		log.Error(err, "registering the metrics")
		os.Exit(1)
	}
	// The field indexes, once, before anything lists by them.
	if err := machinestate.RegisterIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		log.Error(err, "registering the field indexes")
		os.Exit(1)
	}
	if enableWebhooks {
		if err := webhook.Setup(mgr, webhook.Options{Namespace: namespace}); err != nil {
			log.Error(err, "registering the admission webhooks")
			os.Exit(1)
		}
	}
	// The storage hook every disruptive step runs before its drain (removal,
	// reboot-requiring rollouts, upgrades, node operations): Longhorn's, for
	// the machines a longhorn TalosStorage selects; the others go at once.
	storageHook := &hook.Longhorn{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}
	// The Talos connections of the two per-machine reconcilers, which look at
	// every machine again and again: one kept connection per machine, shared
	// (talos.Dialer's Reuse). A client certificate lives twice as long as a
	// connection is handed out, so none is used past its certificate.
	lookNodes := &talos.Dialer{Reuse: talosReuse, CertTTL: max(talos.DefaultCertTTL, 2*talosReuse)}

	// Every reconciler, in one table (STYLE.md, habit 10): what it owns and
	// what it is called in the logs.
	for _, r := range []struct {
		what  string
		setup interface{ SetupWithManager(ctrl.Manager) error }
	}{
		{"the TalosMachine configuration reconciler", &talosmachine.Reconciler{Nodes: lookNodes, Workers: machineWorkers, LookRate: lookRate}},
		{"the machine lifecycle reconciler", &lifecycle.Reconciler{Nodes: lookNodes, Storage: storageHook, Workers: machineWorkers, LookRate: lookRate}},
		// An ichor operation runs the installer Job in Ichor's namespace, its image checked against the embedded Sigstore root.
		{"the TalosOperation reconciler", &operation.Reconciler{Storage: storageHook, OwnNode: ownNode, SelfTrust: selfTrust, Namespace: namespace}},
		{"the kubelet serving certificate approver", &kubeletcsr.Reconciler{}},
		{"the discovery reconciler", &discovery.Reconciler{}},
		{"the MachineReclaim reconciler", &machinereclaim.Reconciler{}},
		{"the foreign talosconfig sweeper", &machinereclaim.Sweeper{}},
		{"the TalosCredentialRequest reconciler", &credentialrequest.Reconciler{}},
		// The users ichor-ui may impersonate, bounded in RBAC (architecture, "Trust").
		{"the impersonation reconciler", &impersonation.Reconciler{Namespace: namespace, ExtraUsers: impersonate}},
		{"the cluster status reconciler", &clusterstatus.Reconciler{}},
		// CNIUnsupported, and status.cni.detected read from the cluster on a slow requeue.
		{"the CNI status reconciler", &cnistatus.Reconciler{}},
		// Cilium handed over from the bootstrap inline manifest to Ichor's Helm release, and its values kept applied.
		{"the Cilium hand-over", &cnihandover.Reconciler{}},
		// The TalosCluster finalizer: a deleted cluster's objects, in order, its nodes left as they are.
		{"the cluster teardown", &teardown.Reconciler{}},
		// TalosStorage's status: the selected machines and ExtensionsPresent.
		{"the TalosStorage status reconciler", &storagestatus.Reconciler{}},
		// Talos upgrade candidates, and the talos operation a spec.talosVersion change starts.
		{"the Talos upgrade starter", &talosupgrade.Reconciler{ReleaseSource: releaseSource}},
		// Kubernetes upgrade candidates, the running version, and the kubernetes operation a spec.kubernetesVersion change starts.
		{"the Kubernetes upgrade starter", &kubernetesupgrade.Reconciler{ReleaseSource: k8sSource}},
		// Automatic patch upgrades (spec.autoPatch, off by default): the two version
		// fields written as the impersonated ServiceAccount ichor-auto-patch, never as the controller.
		{"the automatic patch upgrader", &autopatch.Reconciler{Namespace: namespace}},
		// Scheduled and requested etcd snapshots to S3 (architecture, "Backup, recovery, certificates").
		{"the TalosEtcdBackup reconciler", &etcdbackup.Reconciler{}},
		// The Ichor serving CA, ichor-ui's leaf (ichor-ui-tls) and the published ichor-ui-ca.
		{"the serving CA keeper", &servingca.Keeper{Namespace: namespace}},
		// One replica and no PodDisruptionBudget on a single schedulable node, two with them otherwise.
		{"the controller's and ichor-ui's replicas", &selfdeploy.Reconciler{Namespace: namespace}},
		// Ichor's CiliumNetworkPolicies in its namespace: the egress to what the objects name first, then the
		// static set, the default deny last; NetworkPoliciesApplied on the cluster Ichor runs in (its own Node's).
		{"Ichor's network policies", &netpolicy.Reconciler{Namespace: namespace, OwnNode: ownNode, ReleaseSources: []string{releaseSource, k8sSource}}},
	} {
		if err := r.setup.SetupWithManager(mgr); err != nil {
			log.Error(err, "registering "+r.what)
			os.Exit(1)
		}
	}
	if deployManager == ichorv1alpha1.ManagerHelm {
		// A Helm install's IchorInstallation (architecture, "Deployment"): Helm owns upgrades.
		if err := (&helminstall.Recorder{Version: version.Get().Version}).SetupWithManager(mgr); err != nil {
			log.Error(err, "registering the Helm install's IchorInstallation recorder")
			os.Exit(1)
		}
	}
	if enableWebhooks && manageCerts {
		// Renew the leaf before it expires; the webhook server reloads the files.
		if err := mgr.Add(&certRenewer{client: direct, opts: certOpts}); err != nil {
			log.Error(err, "adding the certificate renewer")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "adding the health check")
		os.Exit(1)
	}
	readyz := healthz.Ping
	if enableWebhooks {
		readyz = mgr.GetWebhookServer().StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		log.Error(err, "adding the readiness check")
		os.Exit(1)
	}

	log.Info("starting ichor-controller", "version", version.Get().Version)
	err = mgr.Start(ctrl.SetupSignalHandler())
	lookNodes.Close()

	if err != nil {
		log.Error(err, "running the manager")
		os.Exit(1)
	}
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

// Set adds one value.
func (l *stringList) Set(v string) error {
	if err := impersonation.CheckExtraUser(v); err != nil {
		return err
	}
	*l = append(*l, v)
	return nil
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// certRenewer re-runs certs.Ensure every day on every replica (each serves
// its own copy of the files), so a leaf close to expiry is renewed.
type certRenewer struct {
	client client.Client
	opts   certs.Options
}

// NeedLeaderElection is false: every replica serves webhooks.
func (r *certRenewer) NeedLeaderElection() bool { return false }

// Start runs until ctx ends.
func (r *certRenewer) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("certs")
	t := time.NewTicker(24 * time.Hour)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := certs.Ensure(ctx, r.client, r.opts); err != nil {
				log.Error(err, "renewing the webhook serving certificate")
			}
		}
	}
}
