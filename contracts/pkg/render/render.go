package render

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/siderolabs/crypto/x509"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
)

// Version is the version of the renderer's output. It is bumped whenever the
// same inputs would render different bytes (a new system-layer document, a
// changed default), so that a change is recognised as Ichor's, a
// desired-state change rather than drift.
const Version = 3

// Layers, bottom-up. LayerBase is the configuration machinery generates; the
// others are the patch layers of the architecture ("Patch layers").
const (
	LayerBase     = "base"
	LayerSystem   = "system"
	LayerCluster  = ichorv1alpha1.LayerCluster
	LayerRole     = ichorv1alpha1.LayerRole
	LayerSelector = ichorv1alpha1.LayerSelector
	LayerMachine  = ichorv1alpha1.LayerMachine
)

// layerRank orders the layers; a layer not listed is refused.
var layerRank = map[string]int{
	LayerSystem:   1,
	LayerCluster:  2,
	LayerRole:     3,
	LayerSelector: 4,
	LayerMachine:  5,
}

// Input is what a render reads. Nothing in it is modified.
type Input struct {
	// Cluster is the machine's TalosCluster.
	Cluster *ichorv1alpha1.TalosCluster
	// Machine is the machine rendered for; its role decides the base config.
	Machine *ichorv1alpha1.TalosMachine
	// Bundle is the cluster's secrets bundle (package bundle loads it).
	Bundle *secrets.Bundle
	// Accepted are the CA certificates accepted beside the bundle's while a
	// CA rotation runs (bundle.LoadAccepted reads them from the bundle
	// Secret); the zero value accepts the bundle's CAs alone.
	Accepted bundle.Accepted
	// Keys are a key rotation's extra service-account public keys and its
	// secretbox keys (bundle.LoadKeyState reads them from the bundle Secret);
	// empty means the bundle's keys alone, as Talos generates them.
	Keys bundle.KeyState
	// Patches are the candidate TalosConfigPatches, typically every patch in
	// the namespace; Render keeps those of the cluster that target the machine.
	Patches []ichorv1alpha1.TalosConfigPatch
	// InlineManifests are bootstrap manifests for a control plane, in the
	// system layer (`ichor init` passes Cilium; the controller passes none).
	InlineManifests []InlineManifest
	// Storages are the candidate TalosStorages, typically every one in the
	// namespace; the system layer prepares the machine for the presets of
	// those of the cluster that select it. Nil renders no storage preset.
	Storages []ichorv1alpha1.TalosStorage
	// Issuer is ichor-ui's issuer as the IchorInstallation publishes it
	// (LoadInput fills it when spec.authentication.ichorUsers is set).
	Issuer *ichorv1alpha1.IssuerStatus
	// Kubernetes pins components to the version they run while a Kubernetes
	// upgrade goes on (kubeupgrade.Pins; LoadInput fills it); the zero value
	// renders the cluster's spec.kubernetesVersion for all.
	Kubernetes kubeupgrade.Versions
}

// Origin says where a value came from.
type Origin struct {
	// Layer is base, system, cluster, role, selector or machine.
	Layer string `json:"layer"`
	// Patch is the TalosConfigPatch name, or the name of Ichor's own
	// system-layer or machine-value patch (ichor-…); empty for base.
	Patch string `json:"patch,omitempty"`
}

// Step is one patch applied, in order.
type Step struct {
	Layer    string `json:"layer"`
	Name     string `json:"name"`
	Priority int32  `json:"priority,omitempty"`

	patch configpatcher.Patch
	docs  []config.Document
}

// Result is a rendered configuration.
type Result struct {
	// Config is the effective configuration (a machinery container).
	Config coreconfig.Provider
	// Bytes are the encoded configuration: what is applied to the node.
	Bytes []byte
	// Hash is Hash(Bytes), what status records.
	Hash string
	// Steps are the patches applied, bottom-up.
	Steps []Step
	// MachineType is the role's machine type.
	MachineType machine.Type

	taintPaths bool
}

// Hash is the hash of configuration bytes: "sha256:" and the hex digest.
func Hash(b []byte) string {
	sum := sha256.Sum256(b)

	return "sha256:" + hex.EncodeToString(sum[:])
}

// RedactedReplacement replaces every secret in the redacted form.
const RedactedReplacement = "******"

// Redacted is the configuration with every secret masked by machinery's
// RedactSecrets, safe to show and to log.
func (r *Result) Redacted() ([]byte, error) {
	return r.Config.RedactSecrets(RedactedReplacement).EncodeBytes(encodeOptions()...)
}

// RedactedValues is the redacted configuration flattened by path, for the
// effective-config view (together with Origins).
func (r *Result) RedactedValues() (Values, error) {
	return DocumentValues(r.Config.RedactSecrets(RedactedReplacement).Documents())
}

// Origins maps every value of the rendered configuration to the layer and
// patch that set it last. A value no patch set is LayerBase. It is computed
// on demand: the reconciler needs only the bytes and the hash.
func (r *Result) Origins() (map[Path]Origin, error) {
	final, err := DocumentValues(r.Config.Documents())
	if err != nil {
		return nil, err
	}

	setBy := map[Path]Origin{}

	if r.taintPaths {
		for p := range final {
			if p.Kind == "KubeNodeConfig" && (p.Field == "taints" || strings.HasPrefix(p.Field, "taints.") || strings.HasPrefix(p.Field, "taints[")) {
				setBy[p] = Origin{Layer: LayerSystem, Patch: PatchControlPlaneTaints}
			}
		}
	}

	for _, s := range r.Steps {
		vals, err := DocumentValues(s.docs)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", s.Layer, s.Name, err)
		}

		for p, v := range vals {
			// An empty map is how the encoder writes a field the patch left
			// unset (meta.Unstructured, a struct without omitempty); it sets nothing.
			if m, ok := v.(map[string]any); ok && len(m) == 0 {
				continue
			}

			// An empty string or list is a field without omitempty the patch
			// left unset (KubeletConfig's image, v1alpha1's cluster.network
			// fields): machinery's merge skips zero values
			// (config/merge/merge.go), so the patch did not set it.
			if zeroValue(v) {
				continue
			}

			setBy[p] = Origin{Layer: s.Layer, Patch: s.Name}
		}
	}

	out := make(map[Path]Origin, len(final))

	for p := range final {
		o, ok := setBy[p]
		if !ok {
			o = Origin{Layer: LayerBase}
		}

		out[p] = o
	}

	return out, nil
}

func zeroValue(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	default:
		return false
	}
}

// validationMode is an installed machine on metal: Ichor validates what it
// will apply to a machine that installs to disk.
type validationMode struct{}

func (validationMode) String() string        { return "metal" }
func (validationMode) RequiresInstall() bool { return true }
func (validationMode) InContainer() bool     { return false }

// Validate checks the rendered configuration with machinery's client-side
// validation (ValidateAsClient), returning its warnings. The node validates
// again when the configuration is applied (a dry run surfaces that).
func (r *Result) Validate() ([]string, error) {
	return r.Config.ValidateAsClient(validationMode{})
}

// Entry is one value of the effective-config view: redacted, with its origin.
type Entry struct {
	Path   Path   `json:"path"`
	Value  any    `json:"value"`
	Origin Origin `json:"origin"`
}

// Effective is the effective-config view of the UI: every value, secrets
// masked, with the layer and patch it came from, in path order.
func (r *Result) Effective() ([]Entry, error) {
	vals, err := r.RedactedValues()
	if err != nil {
		return nil, err
	}

	origins, err := r.Origins()
	if err != nil {
		return nil, err
	}

	out := make([]Entry, 0, len(vals))
	for _, p := range vals.SortedPaths() {
		out = append(out, Entry{Path: p, Value: vals[p], Origin: origins[p]})
	}

	return out, nil
}

// Render renders the configuration of in.Machine.
func Render(in Input) (*Result, error) {
	if in.Cluster == nil || in.Machine == nil || in.Bundle == nil {
		return nil, errors.New("render needs a cluster, a machine and a secrets bundle")
	}

	vc, err := bundle.Contract(in.Cluster.Spec.VersionContract)
	if err != nil {
		return nil, err
	}

	mt, err := machineType(in.Machine.Spec.Role)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", in.Machine.Name, err)
	}

	base, err := baseConfig(in, vc, mt)
	if err != nil {
		return nil, err
	}

	system, err := SystemPatches(in.Cluster, in.Machine, vc, in.Storages, in.Issuer)
	if err != nil {
		return nil, err
	}

	inline, err := inlineManifestDocs(in, vc)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", in.Machine.Name, err)
	}

	if len(inline) > 0 {
		s, err := yamlStep(LayerSystem, PatchInlineManifests, inline...)
		if err != nil {
			return nil, err
		}

		system = append(system, s)
	}

	values, err := MachineValues(in.Machine, vc)
	if err != nil {
		return nil, err
	}

	user, err := selectPatches(in)
	if err != nil {
		return nil, err
	}

	steps := make([]Step, 0, len(system)+len(values)+len(user))
	steps = append(steps, system...)

	// The machine layer starts with the machine's own values, then its patches.
	for _, s := range user {
		if s.Layer == LayerMachine && values != nil {
			steps = append(steps, values...)
			values = nil
		}

		steps = append(steps, s)
	}

	steps = append(steps, values...)

	patches := make([]configpatcher.Patch, len(steps))
	for i := range steps {
		patches[i] = steps[i].patch
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(base), patches)
	if err != nil {
		return nil, fmt.Errorf("apply patches to machine %s: %w", in.Machine.Name, err)
	}

	cfg, err := out.Config()
	if err != nil {
		return nil, fmt.Errorf("apply patches to machine %s: %w", in.Machine.Name, err)
	}

	if in.Kubernetes.Pinned() {
		// The images are known only once every layer applied, so the pins
		// go on top, last.
		pins, err := kubernetesPinSteps(cfg, in.Cluster.Spec.KubernetesVersion, in.Kubernetes)
		if err != nil {
			return nil, fmt.Errorf("machine %s: %w", in.Machine.Name, err)
		}

		if len(pins) > 0 {
			ps := make([]configpatcher.Patch, len(pins))
			for i := range pins {
				ps[i] = pins[i].patch
			}

			pinned, err := configpatcher.Apply(configpatcher.WithConfig(cfg), ps)
			if err != nil {
				return nil, fmt.Errorf("pin the Kubernetes versions of machine %s: %w", in.Machine.Name, err)
			}

			if cfg, err = pinned.Config(); err != nil {
				return nil, fmt.Errorf("pin the Kubernetes versions of machine %s: %w", in.Machine.Name, err)
			}

			steps = append(steps, pins...)
		}
	}

	b, err := cfg.EncodeBytes(encodeOptions()...)
	if err != nil {
		return nil, fmt.Errorf("encode the configuration of machine %s: %w", in.Machine.Name, err)
	}

	return &Result{
		Config:      cfg,
		Bytes:       b,
		Hash:        Hash(b),
		Steps:       steps,
		MachineType: mt,
		taintPaths:  mt == machine.TypeControlPlane,
	}, nil
}

func machineType(role string) (machine.Type, error) {
	switch role {
	case ichorv1alpha1.RoleControlPlane:
		return machine.TypeControlPlane, nil
	case ichorv1alpha1.RoleWorker:
		return machine.TypeWorker, nil
	default:
		return machine.TypeUnknown, fmt.Errorf("role %q is neither %s nor %s", role, ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker)
	}
}

// Endpoint is the cluster's control-plane URL, https://host:port.
func Endpoint(e ichorv1alpha1.ClusterEndpoint) (string, error) {
	if e.Host == "" {
		return "", errors.New("the cluster endpoint has no host")
	}

	port := e.Port
	if port == 0 {
		port = 6443
	}

	return "https://" + net.JoinHostPort(e.Host, strconv.Itoa(int(port))), nil
}

func baseConfig(in Input, vc *coreconfig.VersionContract, mt machine.Type) (coreconfig.Provider, error) {
	spec := in.Cluster.Spec

	endpoint, err := Endpoint(spec.Endpoint)
	if err != nil {
		return nil, err
	}

	schedulable := spec.ControlPlane.Schedulable != nil && *spec.ControlPlane.Schedulable

	opts := []generate.Option{
		generate.WithSecretsBundle(in.Bundle),
		generate.WithVersionContract(vc),
		// Control-plane taints follow spec.controlPlane.schedulable; machinery's
		// generator owns how (config/generate/kubernetes.go: the node-role taint
		// on control planes unless AllowSchedulingOnControlPlanes).
		generate.WithAllowSchedulingOnControlPlanes(schedulable),
	}

	if spec.Network.DNSDomain != "" {
		opts = append(opts, generate.WithDNSDomain(spec.Network.DNSDomain))
	}

	gen, err := generate.NewInput(in.Cluster.Name, endpoint, strings.TrimPrefix(spec.KubernetesVersion, "v"), opts...)
	if err != nil {
		return nil, fmt.Errorf("generate input: %w", err)
	}

	if len(spec.Network.PodSubnets) > 0 {
		gen.PodNet = append([]string(nil), spec.Network.PodSubnets...)
	}

	if len(spec.Network.ServiceSubnets) > 0 {
		gen.ServiceNet = append([]string(nil), spec.Network.ServiceSubnets...)
	}

	cfg, err := gen.Config(mt)
	if err != nil {
		return nil, fmt.Errorf("generate the %s base configuration: %w", mt, err)
	}

	if !in.Accepted.Empty() {
		if cfg, err = withAccepted(cfg, in.Accepted); err != nil {
			return nil, err
		}
	}

	if in.Keys.Empty() || mt != machine.TypeControlPlane {
		// the two documents are control-plane only
		return cfg, nil
	}

	return withKeys(cfg, in.Keys)
}

// withKeys puts a key rotation's keys into the control plane's
// KubeServiceAccountConfig (accepted.publicKeys: they verify tokens beside
// the issuing key; t:pkg/machinery/config/types/k8s/service_account.go) and
// KubeEtcdEncryptionConfig (the kube-apiserver's EncryptionConfiguration
// body: one secretbox provider whose first key encrypts and whose every key
// decrypts the Secrets whose prefix names it;
// t:pkg/machinery/config/types/k8s/etcd_encryption.go). The v1.12 contract
// has neither document (its single cluster.serviceAccount and
// secretboxEncryptionSecret cannot hold two keys), so keys cannot rotate there.
func withKeys(generated coreconfig.Provider, keys bundle.KeyState) (coreconfig.Provider, error) {
	cfg := generated.Clone()
	docs := cfg.Documents()

	var sa, enc bool

	for _, d := range docs {
		switch doc := d.(type) {
		case *k8s.KubeServiceAccountConfigV1Alpha1:
			doc.ServiceAccepted.PublicKeys = append(doc.ServiceAccepted.PublicKeys, keys.ServiceAccount...)
			sa = true
		case *k8s.KubeEtcdEncryptionConfigV1Alpha1:
			if len(keys.Encryption) == 0 {
				enc = true

				continue
			}

			list := make([]any, 0, len(keys.Encryption))
			for _, k := range keys.Encryption {
				list = append(list, map[string]any{"name": k.Name, "secret": k.Secret})
			}

			doc.Config.Object = map[string]any{
				"resources": []any{map[string]any{
					"resources": []any{"secrets"},
					"providers": []any{map[string]any{"secretbox": map[string]any{"keys": list}}},
				}},
			}
			enc = true
		}
	}

	if !sa || !enc {
		return nil, errors.New("the configuration has no KubeServiceAccountConfig and KubeEtcdEncryptionConfig documents (the v1.14 contract has them): its keys cannot rotate")
	}

	out, err := container.New(docs...)
	if err != nil {
		return nil, fmt.Errorf("add the rotated keys: %w", err)
	}

	return out, nil
}

// withAccepted adds a CA rotation's accepted certificates to the generated
// configuration, where Talos's own rotation puts them
// (t:pkg/rotate/pki/talos/talos.go: machine.acceptedCAs on every node;
// t:pkg/machinery/config/generate/rotatepatcher/kubernetes.go: the
// KubeAPIServerCAConfig document's acceptedCAs when the config has one,
// cluster.acceptedCAs otherwise). The issuing CA stays the bundle's: on
// control planes the document's issuingCA, on workers the first accepted
// certificate, so the accepted ones go after it.
func withAccepted(generated coreconfig.Provider, a bundle.Accepted) (coreconfig.Provider, error) {
	// A clone is writable (a container's own documents are not to be
	// modified, and a read-only one hands out copies).
	cfg := generated.Clone()

	raw := cfg.RawV1Alpha1()
	if raw == nil || raw.MachineConfig == nil {
		return nil, errors.New("the generated configuration has no v1alpha1 machine section for the accepted CAs")
	}

	for _, c := range a.Talos {
		raw.MachineConfig.MachineAcceptedCAs = append(raw.MachineConfig.MachineAcceptedCAs, &x509.PEMEncodedCertificate{Crt: []byte(c)})
	}

	docs := cfg.Documents()
	inDocument := false

	for _, d := range docs {
		if ca, ok := d.(*k8s.KubeAPIServerCAConfigV1Alpha1); ok {
			ca.APIAcceptedCAs = append(ca.APIAcceptedCAs, a.Kubernetes...)
			inDocument = true
		}

		// the aggregator CA's document is control-plane only, and the v1.12
		// contract has none (its single cluster.aggregatorCA cannot hold two;
		// the webhook refuses that rotation there)
		if ca, ok := d.(*k8s.KubeAggregatorCAConfigV1Alpha1); ok {
			ca.AggregatorAcceptedCAs = append(ca.AggregatorAcceptedCAs, a.Aggregator...)
		}
	}

	if !inDocument && raw.ClusterConfig != nil {
		for _, c := range a.Kubernetes {
			//nolint:staticcheck // the v1.12 contract has no KubeAPIServerCAConfig document
			raw.ClusterConfig.ClusterAcceptedCAs = append(raw.ClusterConfig.ClusterAcceptedCAs, &x509.PEMEncodedCertificate{Crt: []byte(c)})
		}
	}

	out, err := container.New(docs...)
	if err != nil {
		return nil, fmt.Errorf("add the accepted CAs: %w", err)
	}

	return out, nil
}

// selectPatches keeps the patches of the cluster that target the machine,
// ordered by layer, priority (higher applies later) and name. A patch being
// deleted no longer applies.
func selectPatches(in Input) ([]Step, error) {
	var steps []Step

	for i := range in.Patches {
		p := &in.Patches[i]

		if p.Spec.ClusterName != in.Cluster.Name || p.Namespace != in.Cluster.Namespace || p.DeletionTimestamp != nil {
			continue
		}

		ok, err := targets(p, in.Machine)
		if err != nil {
			return nil, err
		}

		if !ok {
			continue
		}

		docs := make([]config.Document, 0, len(p.Spec.Documents))

		for j := range p.Spec.Documents {
			d, err := convert.PatchDocumentToMachinery(&p.Spec.Documents[j])
			if err != nil {
				return nil, fmt.Errorf("TalosConfigPatch %s: documents[%d]: %w", p.Name, j, err)
			}

			docs = append(docs, d)
		}

		s, err := newStep(p.Spec.Layer, p.Name, p.Spec.Priority, docs)
		if err != nil {
			return nil, fmt.Errorf("TalosConfigPatch %s: %w", p.Name, err)
		}

		steps = append(steps, s)
	}

	sort.SliceStable(steps, func(i, j int) bool {
		a, b := steps[i], steps[j]
		if layerRank[a.Layer] != layerRank[b.Layer] {
			return layerRank[a.Layer] < layerRank[b.Layer]
		}

		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}

		return a.Name < b.Name
	})

	return steps, nil
}

func newStep(layer, name string, priority int32, docs []config.Document) (Step, error) {
	c, err := container.New(docs...)
	if err != nil {
		return Step{}, err
	}

	return Step{Layer: layer, Name: name, Priority: priority, patch: configpatcher.NewStrategicMergePatch(c), docs: docs}, nil
}

// Targets reports whether a patch applies to a machine by its layer and target.
func Targets(p *ichorv1alpha1.TalosConfigPatch, m *ichorv1alpha1.TalosMachine) (bool, error) {
	return targets(p, m)
}

func targets(p *ichorv1alpha1.TalosConfigPatch, m *ichorv1alpha1.TalosMachine) (bool, error) {
	t := p.Spec.Target

	switch p.Spec.Layer {
	case LayerCluster:
		return true, nil
	case LayerRole:
		return t.Role != "" && t.Role == m.Spec.Role, nil
	case LayerSelector:
		if t.Selector == nil {
			return false, nil
		}

		sel, err := metav1.LabelSelectorAsSelector(t.Selector)
		if err != nil {
			return false, fmt.Errorf("TalosConfigPatch %s: target.selector: %w", p.Name, err)
		}

		return sel.Matches(labels.Set(m.Labels)), nil
	case LayerMachine:
		return t.MachineName != "" && t.MachineName == m.Name, nil
	default:
		return false, fmt.Errorf("TalosConfigPatch %s: unknown layer %q", p.Name, p.Spec.Layer)
	}
}
