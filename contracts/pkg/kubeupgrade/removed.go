package kubeupgrade

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// DeprecatedAPIsMetric is the kube-apiserver gauge of deprecated APIs that
// were requested since it started, labelled group, version, resource,
// subresource and removed_release (k8s.io/apiserver
// pkg/endpoints/metrics/metrics.go, deprecatedRequestGauge; a STABLE metric).
// For a built-in API removed_release is the minor that stops serving it; a
// deprecated version of a CRD has none.
const DeprecatedAPIsMetric = "apiserver_requested_deprecated_apis"

// RemovedAPIs reads the deprecated APIs a kube-apiserver reports in its
// /metrics (the Prometheus text format) and returns those that target (a
// Kubernetes version) no longer serves: removed_release at or below the
// target's minor. An API without a removed_release is not one of them.
func RemovedAPIs(metrics []byte, target string) ([]ichorv1alpha1.RemovedAPI, error) {
	t, err := semver.ParseTolerant(target)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q does not parse: %w", target, err)
	}

	var out []ichorv1alpha1.RemovedAPI

	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 64<<10), 4<<20)

	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, DeprecatedAPIsMetric+"{") {
			continue
		}

		labels, value, err := parseSample(line[len(DeprecatedAPIsMetric):])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", DeprecatedAPIsMetric, err)
		}

		if value == 0 {
			continue
		}

		rel := labels["removed_release"]

		major, minor, ok := majorMinor(rel)
		if !ok || major != t.Major || minor > t.Minor {
			continue
		}

		out = append(out, ichorv1alpha1.RemovedAPI{
			Group: labels["group"], Version: labels["version"], Resource: labels["resource"],
			Subresource: labels["subresource"], RemovedRelease: rel,
		})
	}

	if err := sc.Err(); err != nil {
		return nil, err
	}

	SortRemovedAPIs(out)

	return out, nil
}

// SortRemovedAPIs orders removed APIs by group, version, resource and subresource.
func SortRemovedAPIs(apis []ichorv1alpha1.RemovedAPI) {
	slices.SortFunc(apis, func(a, b ichorv1alpha1.RemovedAPI) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Version, b.Version),
			cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Subresource, b.Subresource))
	})
}

// MergeRemovedAPIs adds what one control plane's kube-apiserver reported to
// all, naming the control plane on each entry.
func MergeRemovedAPIs(all []ichorv1alpha1.RemovedAPI, controlPlane string, found []ichorv1alpha1.RemovedAPI) []ichorv1alpha1.RemovedAPI {
	for _, f := range found {
		i := slices.IndexFunc(all, func(a ichorv1alpha1.RemovedAPI) bool {
			return a.Group == f.Group && a.Version == f.Version && a.Resource == f.Resource && a.Subresource == f.Subresource
		})
		if i < 0 {
			f.ControlPlanes = nil
			all = append(all, f)
			i = len(all) - 1
		}

		if !slices.Contains(all[i].ControlPlanes, controlPlane) {
			all[i].ControlPlanes = append(all[i].ControlPlanes, controlPlane)
		}
	}

	SortRemovedAPIs(all)

	return all
}

// DescribeRemovedAPI is "servicecidrs.v1beta1.networking.k8s.io (removed in 1.37)".
func DescribeRemovedAPI(a ichorv1alpha1.RemovedAPI) string {
	name := a.Resource
	if a.Subresource != "" {
		name += "/" + a.Subresource
	}

	name += "." + a.Version
	if a.Group != "" {
		name += "." + a.Group
	}

	return fmt.Sprintf("%s (removed in %s)", name, a.RemovedRelease)
}

func majorMinor(v string) (uint64, uint64, bool) {
	maj, mnr, ok := strings.Cut(v, ".")
	if !ok {
		return 0, 0, false
	}

	a, err1 := strconv.ParseUint(maj, 10, 64)
	b, err2 := strconv.ParseUint(mnr, 10, 64)

	return a, b, err1 == nil && err2 == nil
}

// parseSample reads `{k="v",…} value [timestamp]` of a Prometheus text sample.
func parseSample(s string) (map[string]string, float64, error) {
	if !strings.HasPrefix(s, "{") {
		return nil, 0, fmt.Errorf("no labels in %q", s)
	}

	labels := map[string]string{}
	i := 1

	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}

		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated labels in %q", s)
		}

		if s[i] == '}' {
			i++

			break
		}

		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return nil, 0, fmt.Errorf("malformed label in %q", s)
		}

		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 2

		var val strings.Builder

		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++

				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}

				continue
			}

			val.WriteByte(s[i])
		}

		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated label value in %q", s)
		}

		i++ // the closing quote
		labels[name] = val.String()
	}

	fields := strings.Fields(s[i:])
	if len(fields) == 0 {
		return nil, 0, fmt.Errorf("no value in %q", s)
	}

	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return nil, 0, fmt.Errorf("value %q: %w", fields[0], err)
	}

	return labels, v, nil
}
