package talosemu

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Talos's bootstrap manifests. t:internal/app/machined/pkg/controllers/k8s/control_plane.go
// (ControlPlaneBootstrapManifestsController) turns the config into BootstrapManifestsConfig;
// t:internal/app/machined/pkg/controllers/k8s/manifest.go renders from it, with the objects of
// t:…/k8s/internal/k8stemplates (kubelet.go, csr.go, kubeconfig.go, talos.go, coredns.go,
// flannel.go, kube-proxy.go, crds.go), the Manifest resources:
//
//	00-kubelet-bootstrapping-token   Secret kube-system/bootstrap-token-<id> (the cluster token)
//	01-csr-node-bootstrap            ClusterRoleBinding system-bootstrap-node-bootstrapper
//	01-csr-approver-role-binding     ClusterRoleBinding system-bootstrap-approve-node-client-csr
//	01-csr-renewal-role-binding      ClusterRoleBinding system-bootstrap-node-renewal
//	05-flannel                       (flannel CNI) ClusterRole, ClusterRoleBinding, ServiceAccount flannel, ConfigMap kube-flannel-cfg, DaemonSet kube-flannel
//	10-kube-proxy                    (proxy enabled) DaemonSet, ServiceAccount kube-proxy, ClusterRoleBinding kube-proxy
//	11-core-dns                      (CoreDNS enabled) ServiceAccount, ClusterRole system:coredns, ClusterRoleBinding, ConfigMap, Deployment coredns
//	11-core-dns-svc                  Service kube-system/kube-dns
//	11-kube-config-in-cluster        ConfigMap kube-system/kubeconfig-in-cluster
//	11-talos-node-rbac-template      ClusterRoleBinding and ClusterRole system:talos-nodes
//	13-talos-service-account-crd     (Talos API access enabled) CRD serviceaccounts.talos.dev
//
// and t:…/k8s/extra_manifest.go adds "99-<name>" per inline manifest. The objects carry the
// names, labels, selectors, images, arguments, tolerations, service accounts, RBAC rules,
// Service addresses and configuration data Talos renders; container probes, resource
// requests and security contexts are left out (nothing in the emulated world runs the
// containers), as are the kube-proxy config-file mode's ConfigMap and flannel's
// kube-network-policies container.

// bootstrapManifestsConfig is ControlPlaneBootstrapManifestsController's transform.
func bootstrapManifestsConfig(cfg talosconfig.Provider) k8s.BootstrapManifestsConfigSpec {
	nc := cfg.K8sNetworkConfig()

	spec := k8s.BootstrapManifestsConfigSpec{
		Server:                 cfg.K8sClusterConfig().ClusterEndpoint().String(),
		ClusterDomain:          nc.DNSDomain(),
		PodCIDRs:               prefixStrings(nc.PodCIDRs()),
		TalosAPIServiceEnabled: cfg.K8sTalosAPIAccessConfig() != nil,
		CNIName:                constants.NoneCNI,
	}

	for _, ip := range k8s.DNSServiceAddrs(nc.ServiceCIDRs()) {
		if spec.DNSServiceIP == "" && ip.Is4() {
			spec.DNSServiceIP = ip.String()
		}

		if spec.DNSServiceIPv6 == "" && ip.Is6() {
			spec.DNSServiceIPv6 = ip.String()
		}
	}

	var flannelHost, flannelPort string

	if kp := cfg.K8sKubePrismConfig(); kp != nil {
		spec.Server = fmt.Sprintf("https://127.0.0.1:%d", kp.Port())
		flannelHost, flannelPort = "127.0.0.1", strconv.Itoa(kp.Port())
	}

	if dns := cfg.K8sCoreDNSConfig(); dns != nil {
		spec.CoreDNSEnabled, spec.CoreDNSImage = dns.Enabled(), dns.Image()
	}

	if proxy := cfg.K8sProxyConfig(); proxy != nil {
		spec.ProxyEnabled, spec.ProxyImage = proxy.Enabled(), proxy.Image()
		spec.ProxyResources = podResources(proxy.Resources())

		mode := cmp.Or(proxy.Mode(), "nftables")
		args := map[string]string{
			"cluster-cidr":           strings.Join(spec.PodCIDRs, ","),
			"hostname-override":      "$(NODE_NAME)",
			kubeconfigFile:           "/etc/kubernetes/kubeconfig",
			"proxy-mode":             mode,
			"conntrack-max-per-core": "0",
		}

		for k, v := range proxy.ExtraArgs() {
			if k != kubeconfigFile && len(v) > 0 {
				args[k] = strings.Join(v, ",")
			}
		}

		keys := make([]string, 0, len(args))
		for k := range args {
			keys = append(keys, k)
		}

		sort.Strings(keys)

		for _, k := range keys {
			spec.ProxyArgs = append(spec.ProxyArgs, "--"+k+"="+args[k])
		}
	}

	if fl := cfg.K8sFlannelCNIConfig(); fl != nil {
		spec.FlannelEnabled = true
		spec.FlannelImage = "ghcr.io/siderolabs/flannel:" + constants.FlannelVersion
		spec.FlannelBackendType = fl.BackendType()
		spec.FlannelBackendPort = fl.BackendPort().ValueOrZero()
		spec.FlannelBackendMTU = fl.BackendMTU().ValueOrZero()
		spec.FlannelBackendExtraConfig = fl.BackendExtraConfig()
		spec.FlannelResources = podResources(fl.Resources())
		spec.FlannelExtraArgs = fl.ExtraArgs()
		spec.FlannelKubeServiceHost, spec.FlannelKubeServicePort = flannelHost, flannelPort
		spec.FlannelKubeNetworkPoliciesEnabled = fl.KubeNetworkPoliciesEnabled()
		spec.CNIName = constants.FlannelCNI
	}

	return spec
}

// renderedManifest is one Manifest resource: its ID and objects.
type renderedManifest struct {
	id   string
	objs []*unstructured.Unstructured
}

// renderManifests renders the Manifest resources of a control plane's config, sorted by ID
// (the order Talos's ManifestApplyController applies them in).
func renderManifests(cfg talosconfig.Provider) ([]renderedManifest, error) {
	spec := bootstrapManifestsConfig(cfg)

	var out []renderedManifest

	add := func(id string, docs ...string) error {
		objs, err := decodeObjects(strings.Join(docs, "\n---\n"))
		if err != nil {
			return fmt.Errorf("manifest %s: %w", id, err)
		}

		out = append(out, renderedManifest{id: id, objs: objs})

		return nil
	}

	tokenID, tokenSecret := "", ""

	if c := cfg.Cluster(); c != nil && c.Token() != nil {
		tokenID, tokenSecret = c.Token().ID(), c.Token().Secret()
	}

	errs := []error{
		add("00-kubelet-bootstrapping-token", fmt.Sprintf(`apiVersion: v1
kind: Secret
type: bootstrap.kubernetes.io/token
metadata: {name: %q, namespace: kube-system}
stringData:
  token-id: %q
  token-secret: %q
  usage-bootstrap-authentication: "true"
  auth-extra-groups: system:bootstrappers:nodes`, "bootstrap-token-"+tokenID, tokenID, tokenSecret)),
		add("01-csr-node-bootstrap", clusterRoleBinding("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", "", groupSubject("system:bootstrappers:nodes"), groupSubject("system:nodes"))),
		add("01-csr-approver-role-binding", clusterRoleBinding("system-bootstrap-approve-node-client-csr", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "", groupSubject("system:bootstrappers:nodes"))),
		add("01-csr-renewal-role-binding", clusterRoleBinding("system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "", groupSubject("system:nodes"))),
		add("11-kube-config-in-cluster", fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: kubeconfig-in-cluster, namespace: kube-system}
data:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters:
    - name: local
      cluster:
        server: %s
        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    users:
    - name: service-account
      user:
        tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    contexts:
    - name: local
      context: {cluster: local, user: service-account}
    current-context: local`, spec.Server)),
		add("11-talos-node-rbac-template",
			clusterRoleBinding("system:talos-nodes", "system:talos-nodes", rbacDefaults, groupSubject("system:nodes")),
			`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:talos-nodes
  labels: {kubernetes.io/bootstrapping: rbac-defaults}
rules:
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [get, list, watch]}`),
	}

	if spec.CoreDNSEnabled {
		errs = append(errs, add("11-core-dns", coreDNSObjects(spec)...), add("11-core-dns-svc", coreDNSService(spec)))
	}

	if spec.FlannelEnabled {
		errs = append(errs, add("05-flannel", flannelObjects(spec)...))
	}

	if spec.ProxyEnabled {
		errs = append(errs, add("10-kube-proxy", kubeProxyObjects(spec)...))
	}

	if spec.TalosAPIServiceEnabled {
		errs = append(errs, add("13-talos-service-account-crd", talosServiceAccountCRD))
	}

	for _, man := range cfg.K8sInlineManifestConfigs() {
		objs, err := decodeObjects(man.Contents())
		if err != nil {
			errs = append(errs, fmt.Errorf("inline manifest %s: %w", man.Name(), err))

			continue
		}

		out = append(out, renderedManifest{id: "99-" + man.Name(), objs: objs})
	}

	sort.SliceStable(out, func(i, j int) bool { return out[i].id < out[j].id })

	return out, errors.Join(errs...)
}

func decodeObjects(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(text)), 4096)

	var objs []*unstructured.Unstructured

	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}

			return nil, err
		}

		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

const rbacDefaults = "rbac-defaults"

func groupSubject(name string) string {
	return fmt.Sprintf("{apiGroup: rbac.authorization.k8s.io, kind: Group, name: %q}", name)
}

func clusterRoleBinding(name, role, bootstrapping string, subjects ...string) string {
	meta := fmt.Sprintf("{name: %q}", name)
	if bootstrapping != "" {
		meta = fmt.Sprintf("{name: %q, labels: {kubernetes.io/bootstrapping: %s}, annotations: {rbac.authorization.kubernetes.io/autoupdate: \"true\"}}", name, bootstrapping)
	}

	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: %s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %q}
subjects:
- %s`, meta, role, strings.Join(subjects, "\n- "))
}

func jsonList(vs []string) string {
	b, _ := json.Marshal(vs) //nolint:errchkjson // strings

	return string(b)
}

const linuxAffinity = `affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: kubernetes.io/os, operator: In, values: [linux]}`

func coreDNSObjects(spec k8s.BootstrapManifestsConfigSpec) []string {
	domain := cmp.Or(spec.ClusterDomain, "cluster.local")

	return []string{
		`apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}`,
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns", labels: {kubernetes.io/bootstrapping: rbac-defaults}}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}`,
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: "system:coredns"
  labels: {kubernetes.io/bootstrapping: rbac-defaults}
  annotations: {rbac.authorization.kubernetes.io/autoupdate: "true"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {kind: ServiceAccount, name: coredns, namespace: kube-system}`,
		fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        log . {
            class error
        }
        prometheus :9153

        kubernetes %[1]s in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 30
        }
        forward . /etc/resolv.conf {
           max_concurrent 1000
        }
        cache 30 {
           disable success %[1]s
           disable denial %[1]s
        }
        loop
        reload
        loadbalance
    }`, domain),
		fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  replicas: 2
  selector: {matchLabels: {k8s-app: kube-dns}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      %s
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector: {matchExpressions: [{key: k8s-app, operator: In, values: [kube-dns]}]}
      priorityClassName: system-cluster-critical
      serviceAccountName: coredns
      dnsPolicy: Default
      nodeSelector: {kubernetes.io/os: linux}
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      - {key: node.cloudprovider.kubernetes.io/uninitialized, operator: Exists, effect: NoSchedule}
      containers:
      - name: coredns
        image: %q
        imagePullPolicy: IfNotPresent
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        volumeMounts: [{name: config-volume, mountPath: /etc/coredns, readOnly: true}]
      volumes:
      - name: config-volume
        configMap: {name: coredns, items: [{key: Corefile, path: Corefile}]}`, linuxAffinity, spec.CoreDNSImage),
	}
}

func coreDNSService(spec k8s.BootstrapManifestsConfigSpec) string {
	var ips, families []string

	if spec.DNSServiceIP != "" {
		ips, families = append(ips, spec.DNSServiceIP), append(families, "IPv4")
	}

	if spec.DNSServiceIPv6 != "" {
		ips, families = append(ips, spec.DNSServiceIPv6), append(families, "IPv6")
	}

	policy := "SingleStack"
	if len(ips) == 2 {
		policy = "RequireDualStack"
	}

	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/cluster-service: "true", kubernetes.io/name: CoreDNS}
  annotations: {prometheus.io/port: "9153", prometheus.io/scrape: "true"}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: %q
  clusterIPs: %s
  ipFamilies: %s
  ipFamilyPolicy: %s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
  - {name: metrics, port: 9153, protocol: TCP, targetPort: 9153}`, cmp.Or(spec.DNSServiceIP, spec.DNSServiceIPv6), jsonList(ips), jsonList(families), policy)
}

func flannelObjects(spec k8s.BootstrapManifestsConfigSpec) []string {
	netConf := map[string]any{"EnableNFTables": true}
	backend := map[string]any{"Type": spec.FlannelBackendType}

	if spec.FlannelBackendPort != 0 {
		backend["Port"] = spec.FlannelBackendPort
	}

	if spec.FlannelBackendMTU != 0 {
		backend["MTU"] = spec.FlannelBackendMTU
	}

	for k, v := range spec.FlannelBackendExtraConfig {
		backend[k] = v
	}

	netConf["Backend"] = backend

	for _, c := range spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is6() {
			netConf["IPv6Network"] = c
			netConf["EnableIPv6"] = true
		} else {
			netConf["Network"] = c
		}
	}

	if _, ok := netConf["Network"]; !ok {
		netConf["EnableIPv4"] = false
	}

	netJSON, _ := json.MarshalIndent(netConf, "    ", "  ") //nolint:errchkjson // plain values

	env := `- {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: EVENT_QUEUE_DEPTH, value: "5000"}
        - {name: CONT_WHEN_CACHE_NOT_READY, value: "false"}`

	if spec.FlannelKubeServiceHost != "" {
		env += fmt.Sprintf("\n        - {name: KUBERNETES_SERVICE_HOST, value: %q}\n        - {name: KUBERNETES_SERVICE_PORT, value: %q}", spec.FlannelKubeServiceHost, spec.FlannelKubeServicePort)
	}

	return []string{
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: flannel, labels: {k8s-app: flannel}}
rules:
- {apiGroups: [""], resources: [pods, nodes, namespaces], verbs: [get, list, watch]}
- {apiGroups: [""], resources: [nodes/status], verbs: [patch]}`,
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: flannel, labels: {k8s-app: flannel}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: flannel}
subjects:
- {kind: ServiceAccount, name: flannel, namespace: kube-system}`,
		`apiVersion: v1
kind: ServiceAccount
metadata: {name: flannel, namespace: kube-system, labels: {k8s-app: flannel}}`,
		fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: kube-flannel-cfg, namespace: kube-system, labels: {k8s-app: flannel, tier: node}}
data:
  cni-conf.json: |-
    {
      "name": "cbr0",
      "cniVersion": "1.0.0",
      "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}}
      ]
    }
  net-conf.json: |-
    %s`, netJSON),
		fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel, namespace: kube-system, labels: {k8s-app: flannel, tier: node}}
spec:
  selector: {matchLabels: {k8s-app: flannel, tier: node}}
  template:
    metadata: {labels: {k8s-app: flannel, tier: node}}
    spec:
      %s
      hostNetwork: true
      priorityClassName: system-node-critical
      serviceAccountName: flannel
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      - {operator: Exists, effect: NoExecute}
      initContainers:
      - name: install-config
        image: %[3]q
        command: [cp]
        args: [-f, /etc/kube-flannel/cni-conf.json, /etc/cni/net.d/10-flannel.conflist]
        volumeMounts: [{name: cni, mountPath: /etc/cni/net.d}, {name: flannel-cfg, mountPath: /etc/kube-flannel/}]
      containers:
      - name: kube-flannel
        image: %[3]q
        command: [/opt/bin/flanneld]
        args: %[4]s
        env:
        %[2]s
        volumeMounts: [{name: run, mountPath: /run/flannel}, {name: flannel-cfg, mountPath: /etc/kube-flannel/}]
      volumes:
      - {name: run, hostPath: {path: /run/flannel}}
      - {name: cni, hostPath: {path: /etc/cni/net.d}}
      - {name: flannel-cfg, configMap: {name: kube-flannel-cfg}}`, linuxAffinity, env, spec.FlannelImage,
			jsonList(append([]string{"--ip-masq", "--kube-subnet-mgr"}, spec.FlannelExtraArgs...))),
	}
}

func kubeProxyObjects(spec k8s.BootstrapManifestsConfigSpec) []string {
	return []string{
		fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-proxy, namespace: kube-system, labels: {k8s-app: kube-proxy, tier: node}}
spec:
  selector: {matchLabels: {k8s-app: kube-proxy, tier: node}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {k8s-app: kube-proxy, tier: node}}
    spec:
      %s
      hostNetwork: true
      priorityClassName: system-cluster-critical
      serviceAccountName: kube-proxy
      tolerations:
      - {operator: Exists, effect: NoSchedule}
      - {operator: Exists, effect: NoExecute}
      containers:
      - name: kube-proxy
        image: %q
        command: %s
        env:
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        volumeMounts:
        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
        - {name: ssl-certs-host, mountPath: /etc/ssl/certs, readOnly: true}
        - {name: kubeconfig, mountPath: /etc/kubernetes, readOnly: true}
      volumes:
      - {name: lib-modules, hostPath: {path: /usr/lib/modules}}
      - {name: ssl-certs-host, hostPath: {path: /etc/ssl/certs}}
      - {name: kubeconfig, configMap: {name: kubeconfig-in-cluster}}`, linuxAffinity, spec.ProxyImage,
			jsonList(append([]string{"/usr/local/bin/kube-proxy"}, spec.ProxyArgs...))),
		`apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-proxy, namespace: kube-system}`,
		`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-proxy}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-proxier"}
subjects:
- {kind: ServiceAccount, name: kube-proxy, namespace: kube-system}`,
	}
}

const talosServiceAccountCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: serviceaccounts.talos.dev}
spec:
  group: talos.dev
  scope: Namespaced
  conversion: {strategy: None}
  names: {kind: ServiceAccount, listKind: ServiceAccountList, plural: serviceaccounts, singular: serviceaccount, shortNames: [tsa]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              roles: {type: array, items: {type: string}}
          status:
            type: object
            properties:
              failureReason: {type: string}`
