package talosemu

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeBinaries are the binaries `go tool task assets` builds into KUBEBUILDER_ASSETS.
var kubeBinaries = []string{k8s.APIServerID, k8s.ControllerManagerID, k8s.SchedulerID}

// checkKubeAssets reports a clear error when a Kubernetes binary is missing.
func checkKubeAssets(dir string) error {
	if dir == "" {
		return errors.New("Kubernetes binaries: no assets directory (set Options.KubeAssets / --kube-assets or KUBEBUILDER_ASSETS; run `go tool task assets` to build them)") //nolint:staticcheck // names a command
	}

	for _, b := range kubeBinaries {
		if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
			return fmt.Errorf("Kubernetes binaries: %s not found in %s (run `go tool task assets` to build them)", b, dir) //nolint:staticcheck // names a binary
		}
	}

	return nil
}

// kubeControlPlane is the Kubernetes control plane a control-plane machine runs.
type kubeControlPlane struct {
	procs       []*exec.Cmd
	done        []chan struct{}
	fingerprint string            // apiServerFingerprint of the config it started with
	images      map[string]string // component → the image it runs (kubeversions.go)
	started     time.Time         // when all three serve (zero before); guarded by the machine's etcdMu
}

func kubeCAOf(cfg talosconfig.Provider) *x509.PEMEncodedCertificateAndKey {
	if cfg == nil || cfg.K8sAPIServerCAConfig() == nil {
		return nil
	}

	return cfg.K8sAPIServerCAConfig().IssuingCA()
}

// kubeCACert is the Kubernetes CA certificate of cfg (also on workers).
func kubeCACert(cfg talosconfig.Provider) []byte {
	if cfg == nil || cfg.K8sAPIServerCAConfig() == nil {
		return nil
	}

	if ca := cfg.K8sAPIServerCAConfig().IssuingCA(); ca != nil {
		return ca.Crt
	}

	for _, c := range cfg.K8sAPIServerCAConfig().AcceptedCAs() {
		return c.Crt
	}

	return nil
}

// kubeAcceptedCAs is the Kubernetes CA bundle of cfg: the certificates the
// control plane accepts client certificates from and its clients trust,
// the issuing CA first (t:pkg/machinery/config/types/k8s/apiserver_ca.go
// AcceptedCAs; the v1alpha1 shim in v1alpha1_k8s_bridge.go does the same with
// cluster.ca and cluster.acceptedCAs). Talos writes it as the kube-apiserver's
// client CA file and the CA data of the kubeconfigs it generates
// (t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go,
// t:pkg/kubeconfig/generate.go), and as the kubelet's client CA file
// (t:internal/app/machined/pkg/controllers/k8s/kubelet_service.go).
func kubeAcceptedCAs(cfg talosconfig.Provider) []byte {
	if cfg == nil || cfg.K8sAPIServerCAConfig() == nil {
		return nil
	}

	var out []byte

	for _, c := range cfg.K8sAPIServerCAConfig().AcceptedCAs() {
		if c == nil || len(c.Crt) == 0 || bytes.Contains(out, bytes.TrimSpace(c.Crt)) {
			continue
		}

		out = append(out, bytes.TrimSpace(c.Crt)...)
		out = append(out, '\n')
	}

	if len(out) == 0 {
		return kubeCACert(cfg)
	}

	return out
}

// kubeClusterKey names the Kubernetes cluster a machine belongs to: its
// cluster ID (cluster.id, the discovery identity), or, in a hand-written
// config without one, its Kubernetes CA. The ID holds through a CA rotation,
// when the machines of one cluster name different issuing CAs for a while.
func kubeClusterKey(cfg talosconfig.Provider) string {
	if cfg == nil {
		return ""
	}

	if id := cfg.DiscoveryIdentityConfig(); id != nil && id.ClusterID() != "" {
		return "id:" + id.ClusterID()
	}

	if crt := kubeCACert(cfg); crt != nil {
		return "ca:" + string(crt)
	}

	return ""
}

// kubeCAKeyFor finds the Kubernetes CA key for crt among the control planes of the world,
// as the emulated trustd does for the OS CA: workers hold only the certificate.
func (w *World) kubeCAKeyFor(crt []byte) *x509.PEMEncodedCertificateAndKey {
	for _, o := range w.machines {
		if ca := kubeCAOf(o.activeConfig()); ca != nil && len(ca.Key) > 0 && bytes.Equal(ca.Crt, crt) {
			return ca
		}
	}

	return nil
}

// kubeEndpoint is the API server URL of a machine's cluster (cluster.controlPlane.endpoint).
func kubeEndpoint(cfg talosconfig.Provider) string {
	if cfg == nil || cfg.K8sClusterConfig() == nil || cfg.K8sClusterConfig().ClusterEndpoint() == nil {
		return ""
	}

	return cfg.K8sClusterConfig().ClusterEndpoint().String()
}

// restConfigFor builds a client config for endpoint signed by ca with the given
// identity, trusting trust (the accepted bundle; nil: ca alone).
func restConfigFor(endpoint string, ca *x509.PEMEncodedCertificateAndKey, trust []byte, cn string, orgs []string) (*rest.Config, error) {
	if len(trust) == 0 {
		trust = ca.Crt
	}

	crt, key, err := signCert(ca, cn, orgs, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return nil, err
	}

	return &rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: trust, CertData: crt, KeyData: key},
		Timeout:         15 * time.Second,
		QPS:             50,
		Burst:           100,
	}, nil
}

// kubeconfigBytes renders a kubeconfig in Talos's layout (t:pkg/kubeconfig/generate.go):
// cluster named after the cluster, user and context `<user>@<cluster>`.
func kubeconfigBytes(clusterName string, rc *rest.Config, user string) ([]byte, error) {
	ctxName := user + "@" + clusterName

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos[ctxName] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts[ctxName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: ctxName, Namespace: "default"}
	cfg.CurrentContext = ctxName

	return clientcmd.Write(*cfg)
}

func clusterName(cfg talosconfig.Provider) string {
	if cfg != nil && cfg.K8sClusterConfig() != nil && cfg.K8sClusterConfig().ClusterName() != "" {
		return cfg.K8sClusterConfig().ClusterName()
	}

	return nameTalos
}

// adminKubeconfigTarGz is what the Kubeconfig RPC streams: a .tar.gz with one file
// `kubeconfig` (t:…/v1alpha1_server.go Kubeconfig).
func adminKubeconfigTarGz(cfg talosconfig.Provider) ([]byte, error) {
	ca := kubeCAOf(cfg)
	if ca == nil || len(ca.Key) == 0 {
		return nil, errors.New("no Kubernetes CA key in the machine configuration")
	}

	rc, err := restConfigFor(kubeEndpoint(cfg), ca, kubeAcceptedCAs(cfg), "admin", []string{groupMasters})
	if err != nil {
		return nil, err
	}

	kc, err := kubeconfigBytes(clusterName(cfg), rc, "admin")
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer

	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)

	if err := tw.WriteHeader(&tar.Header{Name: kubeconfigFile, Mode: 0o600, Size: int64(len(kc)), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}

	if _, err := tw.Write(kc); err != nil {
		return nil, err
	}

	if err := tw.Close(); err != nil {
		return nil, err
	}

	if err := gz.Close(); err != nil {
		return nil, err
	}

	return buf.Bytes(), nil
}

// runsAPIServer is true when this control plane runs a kube-apiserver: every control plane,
// or with Options.SingleAPIServer only the first control plane of its cluster (spec order).
func (m *Machine) runsAPIServer() bool {
	if !m.world.singleAPIServer {
		return true
	}

	key := kubeClusterKey(m.activeConfig())

	for _, o := range m.world.machines {
		if o.isControlPlane() && kubeClusterKey(o.activeConfig()) == key {
			return o == m
		}
	}

	return false
}

// kubeService starts kube-apiserver, kube-controller-manager and kube-scheduler once the etcd
// member runs, the way Talos's control plane static pods run
// (t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go), then applies
// the inline manifests (t:internal/app/machined/pkg/controllers/k8s/manifest_apply.go).
func (m *Machine) kubeService(ctx context.Context) {
	if ctx.Err() != nil || !m.world.kubernetes || m.runningEtcd() == nil || !m.runsAPIServer() {
		return
	}

	m.runKube(ctx)

	// the first API server of the cluster that is ready starts the cluster's kwok controller
	if ctx.Err() == nil {
		m.world.startKwok(m)
	}

	applied := ""

	for ctx.Err() == nil {
		cfg := m.activeConfig()

		// a change of the apiserver's settings restarts the control plane without a reboot;
		// on real hardware /readyz is away for 15–45 s (Options.APIServerRestartDelay)
		if fp := apiServerFingerprint(cfg); fp != m.kubeFingerprint() {
			m.world.logf("machine %s: kube-apiserver configuration changed, restarting it", m.Name())
			m.stopKube()

			if !sleepCtx(ctx, m.world.apiRestartDelay) {
				return
			}

			m.runKube(ctx)
		}

		// Talos's manifest controllers run again when the Manifest resources change
		// (inline manifests, Kubernetes version); see manifests.go
		if fp := manifestsFingerprint(cfg); fp != applied {
			if err := m.applyManifests(ctx); err != nil {
				m.world.logf("machine %s: manifests: %v", m.Name(), err)
			} else {
				applied = fp
			}
		}

		sleepCtx(ctx, 2*time.Second)
	}
}

// runKube starts the control plane, retrying until it serves or ctx ends.
func (m *Machine) runKube(ctx context.Context) {
	for ctx.Err() == nil {
		err := m.startKube(ctx)
		if err == nil {
			return
		}

		m.world.logf("machine %s: kubernetes control plane: %v", m.Name(), err)
		m.stopKube()
		sleepCtx(ctx, 2*time.Second)
	}
}

func (m *Machine) kubeFingerprint() string {
	m.etcdMu.Lock()
	defer m.etcdMu.Unlock()

	if m.kube == nil {
		return ""
	}

	return m.kube.fingerprint
}

func (m *Machine) kubePKIDir() string { return filepath.Join(m.dir, "pki", "kube") }

// writeKubePKI writes the certificates and kubeconfigs the control plane processes read.
//
//nolint:gocyclo,cyclop
func (m *Machine) writeKubePKI(cfg talosconfig.Provider) (map[string]string, error) {
	ca := kubeCAOf(cfg)
	if ca == nil || len(ca.Key) == 0 {
		return nil, errors.New("no Kubernetes CA in the machine configuration")
	}

	eca := etcdCA(cfg)
	if eca == nil {
		return nil, errors.New("no etcd CA in the machine configuration")
	}

	sa := cfg.K8sServiceAccountConfig()
	if sa == nil || sa.IssuingKey() == nil {
		return nil, errors.New("no service account key in the machine configuration")
	}

	dir := m.kubePKIDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}

	// ca.crt/ca.key: the issuing CA (controller-manager's signing and root CA);
	// accepted-ca.crt: the accepted bundle, the kube-apiserver's client CA
	// (t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go)
	saPub, err := serviceAccountPublicKeys(sa)
	if err != nil {
		return nil, err
	}

	// sa.pub: every accepted service-account public key, the issuing key's
	// first (t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go
	// joins KubernetesRoot's ServiceAccountAcceptedKeys; a KubeServiceAccountConfig
	// document's AcceptedKeys() puts the issuing key's public key first)
	files := map[string][]byte{
		"ca.crt": ca.Crt, "ca.key": ca.Key, "accepted-ca.crt": kubeAcceptedCAs(cfg), "etcd-ca.crt": eca.Crt, "sa.key": sa.IssuingKey().Key,
		"sa.pub": saPub,
	}

	m.mu.Lock()
	hostname := m.hostnameLocked()
	m.mu.Unlock()

	ips := []net.IP{net.ParseIP(m.IP()), net.ParseIP("127.0.0.1")}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", hostLocalhost, hostname}

	if nc := cfg.K8sNetworkConfig(); nc != nil {
		for _, p := range nc.ServiceCIDRs() {
			// the first address of the service range is the kubernetes Service
			a := p.Masked().Addr().Next()
			ips = append(ips, net.IP(a.AsSlice()))
		}
	}

	if u := cfg.K8sClusterConfig(); u != nil && u.ClusterEndpoint() != nil {
		if ip := net.ParseIP(u.ClusterEndpoint().Hostname()); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, u.ClusterEndpoint().Hostname())
		}
	}

	if ac := cfg.K8sAPIServerConfig(); ac != nil {
		for _, s := range ac.CertSANs() {
			if ip := net.ParseIP(s); ip != nil {
				ips = append(ips, ip)
			} else {
				dns = append(dns, s)
			}
		}
	}

	crt, key, err := signCert(ca, "kube-apiserver", nil, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}, ips, dns)
	if err != nil {
		return nil, err
	}

	files["apiserver.crt"], files["apiserver.key"] = crt, key

	crt, key, err = signCert(eca, "kube-apiserver", nil, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return nil, err
	}

	files["etcd-client.crt"], files["etcd-client.key"] = crt, key

	crt, key, err = signCert(ca, "apiserver-kubelet-client", []string{groupMasters}, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return nil, err
	}

	files["kubelet-client.crt"], files["kubelet-client.key"] = crt, key

	if agg := cfg.K8sAggregatorCAConfig(); agg != nil && agg.IssuingCA() != nil && len(agg.IssuingCA().Key) > 0 {
		crt, key, err = signCert(agg.IssuingCA(), "front-proxy-client", nil, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
		if err != nil {
			return nil, err
		}

		// aggregator-ca.crt: every accepted aggregator CA, the issuing one
		// first (t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go
		// joins KubernetesRoot's accepted aggregator CAs); the front proxy's
		// client certificate is the issuing CA's
		files["aggregator-ca.crt"], files["front-proxy-client.crt"], files["front-proxy-client.key"] = aggregatorAcceptedCAs(agg), crt, key
	}

	local := "https://" + net.JoinHostPort(m.IP(), strconv.Itoa(apiPort(cfg)))

	for _, u := range []struct{ file, cn string }{
		{"controller-manager.kubeconfig", "system:kube-controller-manager"},
		{"scheduler.kubeconfig", "system:kube-scheduler"},
	} {
		rc, err := restConfigFor(local, ca, kubeAcceptedCAs(cfg), u.cn, nil)
		if err != nil {
			return nil, err
		}

		b, err := kubeconfigBytes(clusterName(cfg), rc, strings.TrimPrefix(u.cn, "system:"))
		if err != nil {
			return nil, err
		}

		files[u.file] = b
	}

	out := map[string]string{}

	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := writeFileAtomic(p, b, secretFileMode); err != nil {
			return nil, err
		}

		out[name] = p
	}

	return out, nil
}

func apiPort(cfg talosconfig.Provider) int {
	if ac := cfg.K8sAPIServerConfig(); ac != nil && ac.APIPort() > 0 {
		return ac.APIPort()
	}

	return 6443
}

// argsWithExtra merges extra args from the config into the defaults, as Talos does
// (t:pkg/argsbuilder/argsbuilder_args.go Merge): extra args win, except the additive keys,
// whose values are appended to the defaults (duplicates dropped), so that a config's
// `enable-admission-plugins` or `authorization-mode` adds to NodeRestriction and Node,RBAC
// instead of replacing them (t:internal/app/machined/pkg/controllers/k8s/control_plane_final.go).
func argsWithExtra(defaults map[string]string, extra map[string][]string, additive ...string) []string {
	merged := map[string]string{}

	for k, v := range defaults {
		merged[k] = v
	}

	for k, v := range extra {
		val := strings.Join(v, ",")

		if slices.Contains(additive, k) && merged[k] != "" {
			val = mergeAdditive(merged[k], val)
		}

		merged[k] = val
	}

	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, "--"+k+"="+merged[k])
	}

	return out
}

// mergeAdditive joins two comma-separated lists, keeping the first occurrence of each value.
//
//nolint:gocyclo,cyclop
func mergeAdditive(base, extra string) string {
	var out []string

	for _, v := range strings.Split(base+","+extra, ",") {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}

	return strings.Join(out, ",")
}

// additiveAPIServerArgs are the apiserver flags whose extra args add to Talos's defaults
// (t:internal/app/machined/pkg/controllers/k8s/control_plane_final.go mergePolicies).
var additiveAPIServerArgs = []string{"enable-admission-plugins", "authorization-mode", "feature-gates"}

func (m *Machine) startKube(ctx context.Context) error {
	cfg := m.activeConfig()
	if cfg == nil {
		return errors.New("no machine configuration")
	}

	files, err := m.writeKubePKI(cfg)
	if err != nil {
		return err
	}

	logDir := filepath.Join(m.dir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}

	ip := m.IP()
	port := apiPort(cfg)
	endpoint := kubeEndpoint(cfg)

	var serviceCIDRs, podCIDRs []string

	if nc := cfg.K8sNetworkConfig(); nc != nil {
		for _, p := range nc.ServiceCIDRs() {
			serviceCIDRs = append(serviceCIDRs, p.String())
		}

		for _, p := range nc.PodCIDRs() {
			podCIDRs = append(podCIDRs, p.String())
		}
	}

	if len(serviceCIDRs) == 0 {
		serviceCIDRs = []string{"10.96.0.0/12"}
	}

	if len(podCIDRs) == 0 {
		podCIDRs = []string{"10.244.0.0/16"}
	}

	api := map[string]string{
		"advertise-address": ip,
		"allow-privileged":  argTrue,
		"api-audiences":     endpoint,
		// Talos's apiserver authorizes with Node,RBAC and admits with NodeRestriction, so a
		// kubelet (system:node:<name>) can only change its own Node and the pods bound to it
		// (t:internal/app/machined/pkg/controllers/k8s/control_plane_final.go; Talos renders the
		// same authorizers as an --authorization-config file unless extra args set the mode)
		"authorization-mode":          "Node,RBAC",
		flagBindAddress:               ip,
		"client-ca-file":              files["accepted-ca.crt"],
		"enable-admission-plugins":    "NodeRestriction",
		"enable-bootstrap-token-auth": argTrue,
		// the apiserver refuses loopback addresses in the kubernetes Endpoints (Talos: lease)
		"endpoint-reconciler-type":           "none",
		"etcd-cafile":                        files["etcd-ca.crt"],
		"etcd-certfile":                      files["etcd-client.crt"],
		"etcd-keyfile":                       files["etcd-client.key"],
		"etcd-servers":                       m.etcdClientURL(),
		"kubelet-client-certificate":         files["kubelet-client.crt"],
		"kubelet-client-key":                 files["kubelet-client.key"],
		flagProfiling:                        argFalse,
		flagSecurePort:                       strconv.Itoa(port),
		"service-account-issuer":             endpoint,
		"service-account-key-file":           files["sa.pub"],
		"service-account-signing-key-file":   files["sa.key"],
		"service-cluster-ip-range":           strings.Join(serviceCIDRs, ","),
		"tls-cert-file":                      files["apiserver.crt"],
		"tls-private-key-file":               files["apiserver.key"],
		"tls-min-version":                    "VersionTLS13",
		flagCertDir:                          filepath.Join(m.kubePKIDir(), "generated"),
		"event-ttl":                          "1h",
		"default-watch-cache-size":           "20",
		"goaway-chance":                      "0",
		"storage-media-type":                 "application/vnd.kubernetes.protobuf",
		"audit-log-path":                     "",
		"kubelet-preferred-address-types":    "InternalIP",
		"service-account-lookup":             argTrue,
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
	}

	if p, ok := files["aggregator-ca.crt"]; ok {
		api["requestheader-client-ca-file"] = p
		api["proxy-client-cert-file"] = files["front-proxy-client.crt"]
		api["proxy-client-key-file"] = files["front-proxy-client.key"]
	} else {
		for _, k := range []string{"requestheader-allowed-names", "requestheader-extra-headers-prefix", "requestheader-group-headers", "requestheader-username-headers"} {
			delete(api, k)
		}
	}

	delete(api, "audit-log-path")

	// webhooks and aggregated APIs reach pods through their endpoints and the egress proxy
	// (podnet.go)
	if err := m.world.egressArgs(api, m.kubePKIDir()); err != nil {
		return err
	}

	if err := m.writeAPIServerConfigFiles(cfg, api, logDir); err != nil {
		return err
	}

	var apiExtra, cmExtra, schedExtra map[string][]string

	images := map[string]string{}

	if ac := cfg.K8sAPIServerConfig(); ac != nil {
		apiExtra, images[k8s.APIServerID] = ac.ExtraArgs(), ac.Image()
	}

	if cc := cfg.K8sControllerManagerConfig(); cc != nil {
		cmExtra, images[k8s.ControllerManagerID] = cc.ExtraArgs(), cc.Image()
	}

	if sc := cfg.K8sSchedulerConfig(); sc != nil {
		schedExtra, images[k8s.SchedulerID] = sc.ExtraArgs(), sc.Image()
	}

	// each component runs the binary of its image's version; a version without binaries does
	// not start (kubeversions.go)
	bins := map[string]string{}

	for _, c := range kubeBinaries {
		if bins[c], err = m.world.kubeBinary(c, images[c]); err != nil {
			return err
		}
	}

	kc := &kubeControlPlane{fingerprint: apiServerFingerprint(cfg), images: images}

	m.etcdMu.Lock()
	m.kube = kc
	m.world.apiServerRuns(m, true)
	m.etcdMu.Unlock()

	if err := kc.start(bins[k8s.APIServerID], k8s.APIServerID, argsWithExtra(api, apiExtra, additiveAPIServerArgs...), logDir, m.world.serviceProxyEnv(podCIDRs)...); err != nil {
		return err
	}

	admin, err := restConfigFor("https://"+net.JoinHostPort(ip, strconv.Itoa(port)), kubeCAOf(cfg), kubeAcceptedCAs(cfg), "admin", []string{groupMasters})
	if err != nil {
		return err
	}

	if err := waitReady(ctx, admin, 120*time.Second, kc.done[0]); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}

		return fmt.Errorf("kube-apiserver on %s: %w%s", ip, err, logTail(filepath.Join(logDir, "kube-apiserver.log")))
	}

	if err := waitSystemNamespaces(ctx, admin, 120*time.Second); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}

		return fmt.Errorf("kube-apiserver on %s: %w%s", ip, err, logTail(filepath.Join(logDir, "kube-apiserver.log")))
	}

	cm := map[string]string{
		"allocate-node-cidrs":              argTrue,
		flagBindAddress:                    ip,
		flagSecurePort:                     "10257",
		"cluster-cidr":                     strings.Join(podCIDRs, ","),
		"service-cluster-ip-range":         strings.Join(serviceCIDRs, ","),
		"cluster-signing-cert-file":        files["ca.crt"],
		"cluster-signing-key-file":         files["ca.key"],
		"controllers":                      "*,tokencleaner",
		"kubeconfig":                       files["controller-manager.kubeconfig"],
		"authentication-kubeconfig":        files["controller-manager.kubeconfig"],
		"authorization-kubeconfig":         files["controller-manager.kubeconfig"],
		"leader-elect":                     argTrue,
		"root-ca-file":                     files["ca.crt"],
		"service-account-private-key-file": files["sa.key"],
		"use-service-account-credentials":  argTrue,
		flagProfiling:                      argFalse,
		flagCertDir:                        filepath.Join(m.kubePKIDir(), "generated-cm"),
		// kubelets are simulated: a powered-off machine's Node turns NotReady after this
		"node-monitor-grace-period": m.world.nodeMonitorGrace().String(),
	}

	if err := kc.start(bins[k8s.ControllerManagerID], k8s.ControllerManagerID, argsWithExtra(cm, cmExtra), logDir); err != nil {
		return err
	}

	sched := map[string]string{
		flagBindAddress:             ip,
		flagSecurePort:              "10259",
		"kubeconfig":                files["scheduler.kubeconfig"],
		"authentication-kubeconfig": files["scheduler.kubeconfig"],
		"authorization-kubeconfig":  files["scheduler.kubeconfig"],
		"leader-elect":              argTrue,
		flagProfiling:               argFalse,
		flagCertDir:                 filepath.Join(m.kubePKIDir(), "generated-sched"),
	}

	if err := kc.start(bins[k8s.SchedulerID], k8s.SchedulerID, argsWithExtra(sched, schedExtra), logDir); err != nil {
		return err
	}

	m.world.logf("machine %s: kubernetes control plane running on %s:%d", m.Name(), ip, port)

	m.etcdMu.Lock()
	kc.started = time.Now()
	m.etcdMu.Unlock()

	m.setStaticPodStatuses(true, kc.started)

	return nil
}

func (kc *kubeControlPlane) start(bin, name string, args []string, logDir string, env ...string) error {
	log, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}

	cmd := exec.Command(bin, args...) //nolint:gosec,noctx // our own binary; stopped by stopKube
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS=2", "GOMEMLIMIT=400MiB"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		_ = log.Close()

		return fmt.Errorf("starting %s: %w", name, err)
	}

	done := make(chan struct{})

	go func() {
		_ = cmd.Wait()
		_ = log.Close()

		close(done)
	}()

	kc.procs = append(kc.procs, cmd)
	kc.done = append(kc.done, done)

	return nil
}

// stop terminates the processes in reverse order (SIGTERM, then SIGKILL after 10 s).
func (kc *kubeControlPlane) stop() {
	for i := len(kc.procs) - 1; i >= 0; i-- {
		cmd, done := kc.procs[i], kc.done[i]

		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)

		t := time.NewTimer(10 * time.Second)

		select {
		case <-done:
		case <-t.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}

		t.Stop()
	}
}

func (m *Machine) stopKube() {
	m.etcdMu.Lock()
	kc := m.kube
	m.kube = nil
	m.world.apiServerRuns(m, false)
	m.etcdMu.Unlock()

	if kc != nil {
		kc.stop()
		m.setStaticPodStatuses(false, time.Time{})
	}
}

// waitReady polls /readyz until it answers ok.
func waitReady(ctx context.Context, rc *rest.Config, timeout time.Duration, exited <-chan struct{}) error {
	tlsConf, err := rest.TLSConfigFor(rc)
	if err != nil {
		return err
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()

	deadline := time.Now().Add(timeout)

	var last error

	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("the process exited")
		default:
		}

		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rc.Host+"/readyz", nil)
		if err != nil {
			return err
		}

		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()

			if resp.StatusCode == http.StatusOK {
				return nil
			}

			last = fmt.Errorf("/readyz: %s", resp.Status)
		} else {
			last = err
		}

		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}

	return fmt.Errorf("not ready within %s: %w", timeout, last)
}

// systemNamespaces are the namespaces kube-apiserver's own system-namespaces controller creates
// after it starts (k8s:pkg/controlplane/controller/systemnamespaces); /readyz does not wait for
// them, and on a loaded machine a failed first attempt is retried only a minute later.
var systemNamespaces = []string{metav1.NamespaceSystem, metav1.NamespacePublic, metav1.NamespaceDefault}

// waitSystemNamespaces waits until the system namespaces exist, so that a control plane the
// emulator reports as up accepts objects in "default" and "kube-system" at once.
func waitSystemNamespaces(ctx context.Context, rc *rest.Config, timeout time.Duration) error {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	deadline := time.Now().Add(timeout)

	var last error

	for time.Now().Before(deadline) {
		last = nil

		for _, ns := range systemNamespaces {
			if _, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				last = fmt.Errorf("namespace %s: %w", ns, err)

				break
			}
		}

		if last == nil {
			return nil
		}

		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}

	return fmt.Errorf("system namespaces not created within %s: %w", timeout, last)
}

// adminClient returns a client for the machine's cluster endpoint with an admin identity.
func (m *Machine) adminClient() (*kubernetes.Clientset, error) {
	rc, err := m.adminRESTConfig()
	if err != nil {
		return nil, err
	}

	return kubernetes.NewForConfig(rc)
}

// adminRESTConfig is an admin (system:masters) client config for the machine's cluster, as
// machined's temporary control plane client (t:pkg/kubernetes/kubernetes.go
// NewTemporaryClientControlPlane); Talos uses it on control planes for the Node's labels,
// taints and cordon, and for the inline manifests.
func (m *Machine) adminRESTConfig() (*rest.Config, error) {
	return m.clusterRESTConfig("talos:"+m.Name(), []string{groupMasters})
}

// Kubelet client identity: Talos's kubelet gets its client certificate through a CSR with
// CN system:node:<nodename> in group system:nodes
// (t:internal/app/machined/pkg/controllers/k8s/kubelet_service.go checks that common name,
// t:internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/csr.go binds system:nodes).
const (
	kubeletUserPrefix = "system:node:"
	groupNodes        = "system:nodes"
)

// kubeletClient returns a client with this machine's kubelet identity: the Node authorizer and
// NodeRestriction let it change only its own Node, Lease and the pods bound to it.
func (m *Machine) kubeletClient() (*kubernetes.Clientset, error) {
	k, err := m.kubeletClients()
	if err != nil {
		return nil, err
	}

	return k.requests, nil
}

// kubelets are the kubelet's clients: one for requests, with a timeout, and
// one for watches, without; both over the same connection to the API server
// (one transport), as a kubelet has one.
type kubelets struct {
	requests, watches *kubernetes.Clientset
}

func (m *Machine) kubeletClients() (*kubelets, error) {
	rc, err := m.clusterRESTConfig(kubeletUserPrefix+m.nodeName(), []string{groupNodes})
	if err != nil {
		return nil, err
	}

	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}

	requests, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}

	wrc := rest.CopyConfig(rc)
	wrc.Timeout = 0

	watches, err := kubernetes.NewForConfigAndClient(wrc, &http.Client{Transport: hc.Transport})
	if err != nil {
		return nil, err
	}

	return &kubelets{requests: requests, watches: watches}, nil
}

// nodeApplyClient is the client machined's NodeApplyController uses for the Node's labels,
// taints and cordon: the temporary admin client on control planes, the kubelet's on workers
// (t:internal/app/machined/pkg/controllers/k8s/node_apply.go getK8sClient); kubelet is the
// kubelet's client.
func (m *Machine) nodeApplyClient(kubelet *kubernetes.Clientset) (*kubernetes.Clientset, error) {
	if m.isControlPlane() {
		return m.adminClient()
	}

	return kubelet, nil
}

// clusterRESTConfig is a client config for the machine's cluster endpoint with the given
// identity, signed with the cluster's Kubernetes CA (held by the control planes of the world).
func (m *Machine) clusterRESTConfig(cn string, orgs []string) (*rest.Config, error) {
	cfg := m.activeConfig()

	crt := kubeCACert(cfg)
	if crt == nil {
		return nil, errors.New("no Kubernetes CA in the machine configuration")
	}

	ca := m.world.kubeCAKeyFor(crt)
	if ca == nil {
		return nil, errors.New("no control plane holds the Kubernetes CA key")
	}

	rc, err := restConfigFor(kubeEndpoint(cfg), ca, kubeAcceptedCAs(cfg), cn, orgs)
	if err != nil {
		return nil, err
	}

	rc.Dial = m.world.apiDialer(kubeClusterKey(cfg))

	return rc, nil
}

// followingRESTConfig is clusterRESTConfig for a long-lived client: each new
// connection presents a client certificate of the Kubernetes CA the
// machine's configuration issues with at that moment, and verifies the
// server against the CAs it accepts then, so the client goes on working
// through a CA rotation.
func (m *Machine) followingRESTConfig(cn string, orgs []string) (*rest.Config, error) {
	rc, err := m.clusterRESTConfig(cn, orgs)
	if err != nil {
		return nil, err
	}

	u, err := url.Parse(rc.Host)
	if err != nil {
		return nil, err
	}

	var (
		mu       sync.Mutex
		issuedBy []byte
		cert     *tls.Certificate
	)

	clientCert := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		ca := m.world.kubeCAKeyFor(kubeCACert(m.activeConfig()))
		if ca == nil {
			return nil, errors.New("no control plane holds the Kubernetes CA key")
		}

		mu.Lock()
		defer mu.Unlock()

		if cert == nil || !bytes.Equal(issuedBy, ca.Crt) {
			crt, key, err := signCert(ca, cn, orgs, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
			if err != nil {
				return nil, err
			}

			pair, err := tls.X509KeyPair(crt, key)
			if err != nil {
				return nil, err
			}

			cert, issuedBy = &pair, ca.Crt
		}

		return cert, nil
	}

	// VerifyConnection runs on resumed sessions too (VerifyPeerCertificate would not)
	verify := func(cs tls.ConnectionState) error {
		roots := stdx509.NewCertPool()
		roots.AppendCertsFromPEM(kubeAcceptedCAs(m.activeConfig()))

		if len(cs.PeerCertificates) == 0 {
			return errors.New("the API server presented no certificate")
		}

		inter := stdx509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}

		_, err := cs.PeerCertificates[0].Verify(stdx509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: u.Hostname()})

		return err
	}

	dial := rc.Dial
	rc.Dial = nil
	rc.TLSClientConfig = rest.TLSClientConfig{}
	rc.Transport = &http.Transport{
		DialContext:       dial,
		ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// verified by verify against the CAs accepted at the handshake
			InsecureSkipVerify:   true, //nolint:gosec // see VerifyConnection
			VerifyConnection:     verify,
			GetClientCertificate: clientCert,
		},
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
	}

	return rc, nil
}

// apiDialer dials the cluster endpoint and, when it does not answer, the API server of
// another control plane of the same cluster (kubeClusterKey), as KubePrism, the local load
// balancer in front of every API server, does for Talos's kubelet and machined
// (t:internal/app/machined/pkg/controllers/k8s/kubeprism.go). Every API server's certificate
// carries the endpoint's address, so TLS verification against the endpoint holds.
func (w *World) apiDialer(cluster string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}

	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return conn, nil
		}

		for _, other := range w.apiServerAddrs(cluster) {
			if other == addr {
				continue
			}

			if c, oerr := d.DialContext(ctx, network, other); oerr == nil {
				return c, nil
			}
		}

		return nil, err
	}
}

// apiServerState knows the machines whose API server runs, so that the
// KubePrism fallback looks at those only: going through every machine of the
// world at each failed dial made a world of N kubelets cost N² config reads.
type apiServerState struct {
	apiMu      sync.Mutex
	apiServers map[*Machine]struct{}
}

// apiServerRuns records that m's API server runs (or no longer does); the
// caller holds m.etcdMu, as it sets m.kube.
func (w *World) apiServerRuns(m *Machine, runs bool) {
	w.apiMu.Lock()
	defer w.apiMu.Unlock()

	if !runs {
		delete(w.apiServers, m)

		return
	}

	if w.apiServers == nil {
		w.apiServers = map[*Machine]struct{}{}
	}

	w.apiServers[m] = struct{}{}
}

// apiServerAddrs lists host:port of the API servers running for the cluster
// named by kubeClusterKey, by machine name.
func (w *World) apiServerAddrs(cluster string) []string {
	w.apiMu.Lock()
	running := make([]*Machine, 0, len(w.apiServers))

	for o := range w.apiServers {
		running = append(running, o)
	}
	w.apiMu.Unlock()

	slices.SortFunc(running, func(a, b *Machine) int { return strings.Compare(a.Name(), b.Name()) })

	var out []string

	for _, o := range running {
		cfg := o.activeConfig()
		if kubeClusterKey(cfg) != cluster {
			continue
		}

		o.etcdMu.Lock()
		runs := o.kube != nil
		o.etcdMu.Unlock()

		if runs {
			out = append(out, net.JoinHostPort(o.IP(), strconv.Itoa(apiPort(cfg))))
		}
	}

	return out
}

// logTail returns the last lines of a control plane log (they hold flags and paths, never
// key material) for an error message.
func logTail(path string) string {
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil || len(b) == 0 {
		return ""
	}

	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}

	return "\n--- " + filepath.Base(path) + " (tail) ---\n" + string(b)
}

// writeAPIServerConfigFiles writes the admission, audit and authentication configuration of the
// machine config and points the apiserver at them, as Talos renders them
// (t:internal/app/machined/pkg/controllers/k8s/control_plane.go,
// t:internal/app/machined/pkg/controllers/k8s/kube_apiserver_config.go).
func (m *Machine) writeAPIServerConfigFiles(cfg talosconfig.Provider, args map[string]string, logDir string) error {
	dir := filepath.Join(m.kubePKIDir(), "config")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	write := func(name string, doc map[string]any) (string, error) {
		b, err := yaml.Marshal(doc)
		if err != nil {
			return "", err
		}

		p := filepath.Join(dir, name)

		return p, writeFileAtomic(p, b, secretFileMode)
	}

	if plugins := cfg.K8sAdmissionControlPluginConfigs(); len(plugins) > 0 {
		var list []map[string]any

		for _, p := range plugins {
			list = append(list, map[string]any{"name": p.Name(), "configuration": p.Configuration()})
		}

		p, err := write("admission-control-config.yaml", map[string]any{
			"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration", "plugins": list,
		})
		if err != nil {
			return err
		}

		args["admission-control-config-file"] = p
	}

	if ap := cfg.K8sAuditPolicyConfig(); ap != nil && len(ap.Configuration()) > 0 {
		p, err := write("auditpolicy.yaml", ap.Configuration())
		if err != nil {
			return err
		}

		args["audit-policy-file"] = p
		args["audit-log-path"] = filepath.Join(logDir, "audit", "kube-apiserver.log")
		args["audit-log-maxsize"] = "10"
		args["audit-log-maxbackup"] = "1"
	}

	if enc := encryptionConfig(cfg); enc != nil {
		p, err := write("encryptionconfig.yaml", enc)
		if err != nil {
			return err
		}

		args["encryption-provider-config"] = p
	}

	if ac := cfg.K8sAPIServerConfig(); ac != nil && ac.UseAuthenticationConfig() && cfg.K8sAuthenticationConfig() != nil {
		doc := map[string]any{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthenticationConfiguration"}
		for k, v := range cfg.K8sAuthenticationConfig().Configuration() {
			doc[k] = v
		}

		p, err := write("authentication-config.yaml", doc)
		if err != nil {
			return err
		}

		args["authentication-config"] = p
	}

	return nil
}

// apiServerFingerprint digests the settings whose change restarts the apiserver without a
// reboot (Talos re-renders the static pod): extra args, environment, SANs, service account key,
// admission, audit and authentication configuration; and the images of the controller-manager
// and the scheduler (Talos restarts only the changed static pod; the emulator restarts the
// three processes).
func apiServerFingerprint(cfg talosconfig.Provider) string {
	if cfg == nil {
		return ""
	}

	doc := map[string]any{}

	if ac := cfg.K8sAPIServerConfig(); ac != nil {
		doc["args"], doc["sans"], doc["authn"], doc["image"] = ac.ExtraArgs(), ac.CertSANs(), ac.UseAuthenticationConfig(), ac.Image()
		// the environment is part of the static pod too (t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go)
		doc["env"] = ac.Env()
	}

	if cc := cfg.K8sControllerManagerConfig(); cc != nil {
		doc["cmImage"] = cc.Image()
	}

	if sc := cfg.K8sSchedulerConfig(); sc != nil {
		doc["schedImage"] = sc.Image()
	}

	if sa := cfg.K8sServiceAccountConfig(); sa != nil && sa.IssuingKey() != nil {
		doc["sa"] = seed(string(sa.IssuingKey().Key))

		if pub, err := serviceAccountPublicKeys(sa); err == nil {
			doc["saAccepted"] = seed(string(pub))
		}
	}

	// the encryption configuration is part of the apiserver's secrets
	// (encryptionconfig.yaml), so its change recreates the static pod
	if enc := encryptionConfig(cfg); enc != nil {
		b, _ := yaml.Marshal(enc) // a map of decoded YAML always marshals
		doc["encryption"] = seed(string(b))
	}

	// a change of the issuing or accepted Kubernetes CAs changes the secrets
	// version Talos puts on the static pods, so kubelet recreates them
	// (t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go,
	// talos.dev/secrets-version)
	if ca := kubeCAOf(cfg); ca != nil {
		doc["ca"] = seed(string(ca.Crt))
	}

	doc["acceptedCAs"] = seed(string(kubeAcceptedCAs(cfg)))

	if agg := cfg.K8sAggregatorCAConfig(); agg != nil {
		doc["aggregatorCAs"] = seed(string(aggregatorAcceptedCAs(agg)))
	}

	var plugins []any
	for _, p := range cfg.K8sAdmissionControlPluginConfigs() {
		plugins = append(plugins, p.Name(), p.Configuration())
	}

	doc["admission"] = plugins

	if ap := cfg.K8sAuditPolicyConfig(); ap != nil {
		doc["audit"] = ap.Configuration()
	}

	if au := cfg.K8sAuthenticationConfig(); au != nil {
		doc["authentication"] = au.Configuration()
	}

	b, err := yaml.Marshal(doc)
	if err != nil {
		return ""
	}

	return seed(string(b))
}
