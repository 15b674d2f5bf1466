package cilium

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/client-go/rest"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
)

// What Apply did.
const (
	// ActionAdopted is a first install over the objects Talos created from
	// the inline manifest: Helm takes them over without changing them.
	ActionAdopted = "adopted"
	// ActionUpgraded is an upgrade to another chart version or other values.
	ActionUpgraded = "upgraded"
	// ActionUnchanged is a release already deployed with the same chart
	// version and values: nothing was written.
	ActionUnchanged = "unchanged"
)

// MaxHistory is how many records of the release an upgrade keeps.
const MaxHistory = 10

// Request is what the ichor-cni Job is asked to apply; it travels as JSON in
// the key RequestKey of the Job's ConfigMap (RequestConfigMap).
type Request struct {
	// Version is the chart version; empty is release.DefaultCiliumVersion.
	Version string `json:"version,omitempty"`
	// KubernetesVersion is the cluster's Kubernetes version; empty is
	// release.DefaultKubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Choices are the cluster's tunnel, kube-proxy mode and Node count.
	Choices ciliumvalues.Choices `json:"choices"`
	// UserValues is the user's layer (spec.cni.cilium.values).
	UserValues map[string]any `json:"userValues,omitempty"`
}

// Options are the render options of the request: Apply installs what
// Render(ctx, r.Options()) renders.
func (r Request) Options() Options {
	return Options(r)
}

// DecodeRequest reads a Request written as JSON; an unknown field is an
// error, so a typo in a hand-written request is not silently ignored.
func DecodeRequest(data []byte) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Request{}, fmt.Errorf("not a Cilium request (JSON with version, kubernetesVersion, choices, userValues): %w", err)
	}
	return r, nil
}

// Applied is what Apply did.
type Applied struct {
	// Action is ActionAdopted, ActionUpgraded or ActionUnchanged.
	Action string
	// Revision is the release's deployed revision.
	Revision int
	// Version is the chart version deployed (v1.20.2).
	Version string
	// ValuesSHA256 is ValuesSHA256 of the effective values deployed.
	ValuesSHA256 string
}

// ReleaseState is the last record of the release in Helm's storage.
type ReleaseState struct {
	// Status is Helm's status of the record: deployed, failed,
	// pending-upgrade, ...
	Status string
	// Revision is the record's revision.
	Revision int
	// Version is the chart version of the record (v1.20.2).
	Version string
	// ValuesSHA256 is ValuesSHA256 of the record's values.
	ValuesSHA256 string
	// Description is Helm's description of the record ("Install complete",
	// the reason of a failure).
	Description string
}

// ValuesSHA256 is the hex SHA-256 of values' canonical JSON (keys sorted,
// as encoding/json writes maps; nil and empty are the same). Values read
// back from Helm's storage (numbers as float64) hash like the ones given.
func ValuesSHA256(values map[string]any) string {
	if values == nil {
		values = map[string]any{}
	}
	data, err := json.Marshal(values)
	if err != nil {
		// Values are JSON data (they come from JSON or YAML); anything else
		// cannot be stored by Helm either.
		data = fmt.Appendf(nil, "unencodable values: %v", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Deployed reads the release's last record from Helm's storage (Secrets in
// kube-system), whatever its status; no release is (nil, nil). The
// controller checks a Job's claim with it.
func Deployed(_ context.Context, cfg *rest.Config) (*ReleaseState, error) {
	ac, err := actionConfig(cfg)
	if err != nil {
		return nil, err
	}
	last, err := ac.Releases.Last(ReleaseName)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil //nolint:nilnil // no release is not an error
	}
	if err != nil {
		return nil, fmt.Errorf("read the Helm release %s/%s: %w", Namespace, ReleaseName, err)
	}
	return stateOf(last), nil
}

func stateOf(r *release.Release) *ReleaseState {
	s := &ReleaseState{Revision: r.Version, ValuesSHA256: ValuesSHA256(r.Config)}
	if r.Info != nil {
		s.Status, s.Description = r.Info.Status.String(), r.Info.Description
	}
	if r.Chart != nil && r.Chart.Metadata != nil {
		s.Version = "v" + r.Chart.Metadata.Version
	}
	return s
}

// Apply makes the release cilium in kube-system what Render renders for req,
// with Helm's SDK, waiting up to timeout for the DaemonSet and Deployments to
// roll out:
//
//   - no release: install it, taking over the objects Talos created from the
//     inline manifest (Helm adds its label and annotations with a three-way
//     patch and deletes nothing, so the same chart with the same values
//     changes no pod template);
//   - the last record deployed with the same chart version and values:
//     nothing;
//   - else upgrade (taking over objects the new version adds that exist
//     already); a failed upgrade is rolled back to the last deployed
//     revision and the error says so;
//   - a last record left pending-install, pending-upgrade or
//     pending-rollback (a run killed mid-way) is first marked failed, then
//     upgraded over.
//
// It never uninstalls: Cilium is the cluster's network. A request that does
// not render (an unknown version, an Ichor-owned key in the user layer)
// fails before anything is read or written. It writes one line per step to
// log; values are never logged, only their hash.
func Apply(ctx context.Context, cfg *rest.Config, req Request, timeout time.Duration, log io.Writer) (*Applied, error) {
	in, err := prepare(req.Options())
	if err != nil {
		return nil, err
	}
	sum := ValuesSHA256(in.values)
	logf(log, "Cilium chart %s, Kubernetes %s, values sha256 %s", in.version, in.kubeVersion.Version, sum)

	ac, err := actionConfig(cfg)
	if err != nil {
		return nil, err
	}
	// The same capabilities as Render, so the release is Render's manifest.
	ac.Capabilities = in.capabilities()

	last, err := ac.Releases.Last(ReleaseName)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, fmt.Errorf("read the Helm release %s/%s: %w", Namespace, ReleaseName, err)
	}

	if last == nil {
		return install(ctx, ac, in, sum, timeout, log)
	}
	logf(log, "release %s/%s: revision %d is %s (chart %s)", Namespace, ReleaseName, last.Version, last.Info.Status, stateOf(last).Version)

	switch st := last.Info.Status; {
	case st.IsPending():
		if err := recoverPending(ac, last, log); err != nil {
			return nil, err
		}
	case st == release.StatusUninstalling || st == release.StatusUninstalled:
		return nil, fmt.Errorf("the Helm release %s/%s is %s: someone uninstalled Cilium (Ichor never does); "+
			"check the cluster's network, then delete the release's Secrets (label owner=helm,name=%s) in %s so Ichor installs it again",
			Namespace, ReleaseName, st, ReleaseName, Namespace)
	case st == release.StatusDeployed && stateOf(last).Version == in.version && ValuesSHA256(last.Config) == sum:
		logf(log, "release %s/%s: revision %d already has chart %s with these values; nothing to do", Namespace, ReleaseName, last.Version, in.version)
		return &Applied{Action: ActionUnchanged, Revision: last.Version, Version: in.version, ValuesSHA256: sum}, nil
	}
	return upgrade(ctx, ac, in, sum, timeout, log)
}

func install(ctx context.Context, ac *action.Configuration, in *inputs, sum string, timeout time.Duration, log io.Writer) (*Applied, error) {
	i := action.NewInstall(ac)
	i.ReleaseName = ReleaseName
	i.Namespace = Namespace
	// Take over what Talos created from the inline manifest
	// (helm.sh/helm/v3 pkg/action/install.go: requireAdoption, then
	// UpdateThreeWayMerge, which only adds what differs and deletes nothing).
	i.TakeOwnership = true
	i.Wait = true
	i.Timeout = timeout
	// Never Atomic: a failed atomic install uninstalls the release, that is
	// the cluster's network. A failed install is left failed; the next run
	// upgrades over it.
	i.Atomic = false

	logf(log, "installing release %s/%s (chart %s), taking over the existing objects; waiting up to %s for the rollout", Namespace, ReleaseName, in.version, timeout)
	rel, err := i.RunWithContext(ctx, in.chart, copyValues(in.values))
	if err != nil {
		return nil, fmt.Errorf("install the Helm release %s/%s (chart %s) failed, the release is left failed and nothing was removed; the next run upgrades it: %w",
			Namespace, ReleaseName, in.version, err)
	}
	logf(log, "release %s/%s: revision %d deployed (adopted)", Namespace, ReleaseName, rel.Version)
	return &Applied{Action: ActionAdopted, Revision: rel.Version, Version: in.version, ValuesSHA256: sum}, nil
}

func upgrade(ctx context.Context, ac *action.Configuration, in *inputs, sum string, timeout time.Duration, log io.Writer) (*Applied, error) {
	u := action.NewUpgrade(ac)
	u.Namespace = Namespace
	u.TakeOwnership = true
	u.Wait = true
	u.Timeout = timeout
	// Ichor's values are complete: never merge in the stored ones.
	u.ResetValues = true
	// Atomic stays off: the rollback below is Ichor's, so it is logged.
	u.Atomic = false
	u.CleanupOnFail = false
	// Keep the release's history bounded (Helm deletes the oldest
	// superseded records, never the deployed one).
	u.MaxHistory = MaxHistory

	logf(log, "upgrading release %s/%s to chart %s; waiting up to %s for the rollout", Namespace, ReleaseName, in.version, timeout)
	rel, err := u.RunWithContext(ctx, ReleaseName, in.chart, copyValues(in.values))
	if err == nil {
		logf(log, "release %s/%s: revision %d deployed (upgraded)", Namespace, ReleaseName, rel.Version)
		return &Applied{Action: ActionUpgraded, Revision: rel.Version, Version: in.version, ValuesSHA256: sum}, nil
	}
	logf(log, "upgrade failed: %v", err)

	prev, derr := ac.Releases.Deployed(ReleaseName)
	if derr != nil {
		return nil, fmt.Errorf("upgrade the Helm release %s/%s to chart %s failed, and there is no deployed revision to roll back to (%w): %w",
			Namespace, ReleaseName, in.version, derr, err)
	}
	logf(log, "rolling back release %s/%s to revision %d (chart v%s); waiting up to %s", Namespace, ReleaseName, prev.Version, prev.Chart.Metadata.Version, timeout)
	failed, lerr := ac.Releases.Last(ReleaseName)
	if lerr != nil {
		return nil, fmt.Errorf("upgrade the Helm release %s/%s to chart %s failed, and its record cannot be read to roll back (%w): %w",
			Namespace, ReleaseName, in.version, lerr, err)
	}
	if _, rerr := rollback(ac, failed, prev, timeout, log); rerr != nil {
		return nil, fmt.Errorf("upgrade the Helm release %s/%s to chart %s failed, and the rollback to revision %d failed too (%w): %w",
			Namespace, ReleaseName, in.version, prev.Version, rerr, err)
	}
	logf(log, "release %s/%s: rolled back to revision %d", Namespace, ReleaseName, prev.Version)
	return nil, fmt.Errorf("upgrade the Helm release %s/%s to chart %s failed and was rolled back to revision %d: %w",
		Namespace, ReleaseName, in.version, prev.Version, err)
}

// recoverPending marks a record left pending by an interrupted run failed,
// so that Helm upgrades over it (helm.sh/helm/v3 pkg/action/upgrade.go,
// prepareUpgrade, refuses a pending last release: errPending).
func recoverPending(ac *action.Configuration, last *release.Release, log io.Writer) error {
	was := last.Info.Status
	last.SetStatus(release.StatusFailed, fmt.Sprintf("Ichor: the operation was interrupted (left %s, the ichor-cni Job stopped mid-way); marked failed to upgrade over it", was))
	if err := ac.Releases.Update(last); err != nil {
		return fmt.Errorf("mark the interrupted revision %d of the Helm release %s/%s failed: %w", last.Version, Namespace, ReleaseName, err)
	}
	logf(log, "recovered: revision %d was left %s by an interrupted run; marked it failed, upgrading over it", last.Version, was)
	return nil
}

// actionConfig is Helm's configuration for the release: the cluster of cfg,
// release records in Secrets of kube-system. Helm's own debug log is not
// passed on (it repeats every poll of its waits); Apply logs its steps.
func actionConfig(cfg *rest.Config) (*action.Configuration, error) {
	ac := &action.Configuration{}
	if err := ac.Init(NewRESTClientGetter(cfg), Namespace, "secret", func(string, ...any) {}); err != nil {
		return nil, fmt.Errorf("set up Helm for %s: %w", cfg.Host, err)
	}
	return ac, nil
}

func logf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format+"\n", args...)
}
