package release

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
)

// The Kubernetes releases a cluster may upgrade to are the tags of the
// kubelet image Talos runs (constants.KubeletImage, ghcr.io/siderolabs/kubelet):
// Talos runs no Kubernetes its kubelet image does not exist for. They are
// read with the OCI distribution API's tag list (GET /v2/<name>/tags/list,
// github.com/opencontainers/distribution-spec spec.md "Listing Tags"), with
// the anonymous bearer token a public registry hands out on a 401 (the
// Docker registry token flow that ghcr.io follows).

// DefaultKubernetesReleaseSource is the registry of the kubelet image.
const DefaultKubernetesReleaseSource = "https://ghcr.io"

// KubeletRepository is the kubelet image's repository on that registry.
const KubeletRepository = "siderolabs/kubelet"

// FetchKubernetesVersions reads the tags of the kubelet image from the
// registry at base (a URL; the repository is KubeletRepository).
func FetchKubernetesVersions(ctx context.Context, hc *http.Client, base string) ([]string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}

	u := strings.TrimSuffix(base, "/") + "/v2/" + KubeletRepository + "/tags/list?n=1000"

	resp, err := get(ctx, hc, u, "")
	if err != nil {
		return nil, err
	}

	if resp.StatusCode == http.StatusUnauthorized {
		challenge := resp.Header.Get("WWW-Authenticate")
		_ = resp.Body.Close()

		token, err := anonymousToken(ctx, hc, challenge)
		if err != nil {
			return nil, fmt.Errorf("reading the Kubernetes releases from %s: %w", u, err)
		}

		if resp, err = get(ctx, hc, u, token); err != nil {
			return nil, err
		}
	}
	defer resp.Body.Close() //nolint:errcheck // a read-only body

	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the Kubernetes releases from %s: %s", u, resp.Status)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionsBody))
	if err != nil {
		return nil, fmt.Errorf("reading the Kubernetes releases from %s: %w", u, err)
	}

	var list struct {
		Tags []string `json:"tags"`
	}

	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("the Kubernetes releases from %s are not an OCI tag list: %w", u, err)
	}

	return list.Tags, nil
}

func get(ctx context.Context, hc *http.Client, u, token string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("release source %q is not a URL: %w", u, err)
	}

	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}

	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the Kubernetes releases from %s: %w", u, err)
	}

	return resp, nil
}

// anonymousToken follows a `Bearer realm="…",service="…",scope="…"` challenge
// without credentials.
func anonymousToken(ctx context.Context, hc *http.Client, challenge string) (string, error) {
	scheme, params, ok := strings.Cut(challenge, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("the registry asks for %q authentication, not an anonymous bearer token", scheme)
	}

	kv := map[string]string{}

	for _, p := range splitChallenge(params) {
		k, v, _ := strings.Cut(p, "=")
		kv[strings.ToLower(strings.TrimSpace(k))] = strings.Trim(strings.TrimSpace(v), `"`)
	}

	realm, err := url.Parse(kv["realm"])
	if err != nil || realm.Scheme == "" {
		return "", fmt.Errorf("the registry's token realm %q is not a URL", kv["realm"])
	}

	q := realm.Query()

	for _, k := range []string{"service", "scope"} {
		if kv[k] != "" {
			q.Set(k, kv[k])
		}
	}

	realm.RawQuery = q.Encode()

	resp, err := get(ctx, hc, realm.String(), "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close() //nolint:errcheck // a read-only body

	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("the registry's token endpoint answers %s", resp.Status)
	}

	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}

	if err := json.NewDecoder(io.LimitReader(resp.Body, maxVersionsBody)).Decode(&tok); err != nil {
		return "", fmt.Errorf("the registry's token does not parse: %w", err)
	}

	return cmp.Or(tok.Token, tok.AccessToken), nil
}

// splitChallenge splits challenge parameters at commas outside quotes.
func splitChallenge(s string) []string {
	var (
		out    []string
		cur    strings.Builder
		quoted bool
	)

	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted

			cur.WriteRune(r)
		case r == ',' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}

	return append(out, cur.String())
}

// KubernetesCandidates are the Kubernetes versions a cluster running current
// on Talos talosVersion may move to, out of available (a tag list, in any
// order): final releases newer than current, of its minor or the next one
// (KubernetesSkew), that the Talos supports (CheckPair); grouped and ordered
// as TalosCandidates does, recommended (normally the pinned set's Kubernetes)
// its own group. Tags that do not parse as versions (flavours such as
// "v1.37.2-fat", "latest", digests) are left out.
func KubernetesCandidates(current, recommended, talosVersion string, available []string) ([]Candidate, error) {
	if _, err := parse("kubernetes", current); err != nil {
		return nil, err
	}

	return candidates(current, recommended, available, func(v string) bool {
		return KubernetesSkew(current, v) == nil && CheckPair(talosVersion, v) == nil
	})
}

// candidates groups the final versions of available newer than current, of
// its minor or the next, that accept takes.
func candidates(current, recommended string, available []string, accept func(string) bool) ([]Candidate, error) {
	cur, err := parse("version", current)
	if err != nil {
		return nil, err
	}

	rec, recErr := semver.ParseTolerant(recommended)
	seen := map[string]bool{}

	var out []Candidate

	for _, a := range available {
		v, err := semver.ParseTolerant(a)
		if err != nil || len(v.Pre) > 0 || len(v.Build) > 0 || !v.GT(cur) || v.Major != cur.Major || strings.Count(strings.TrimPrefix(a, "v"), ".") != 2 {
			continue
		}

		name := "v" + v.String()
		if seen[name] {
			continue
		}

		seen[name] = true

		var group string

		switch v.Minor {
		case cur.Minor:
			group = GroupPatch
		case cur.Minor + 1:
			group = GroupNextMinor
		default:
			continue
		}

		if !accept(name) {
			continue
		}

		if recErr == nil && v.EQ(rec) {
			group = GroupRecommended
		}

		out = append(out, Candidate{Version: name, Group: group})
	}

	order := map[string]int{GroupRecommended: 0, GroupPatch: 1, GroupNextMinor: 2}
	version := func(c Candidate) semver.Version { return semver.MustParse(strings.TrimPrefix(c.Version, "v")) }

	slices.SortFunc(out, func(a, b Candidate) int {
		return cmp.Or(cmp.Compare(order[a.Group], order[b.Group]), version(b).Compare(version(a)))
	})

	def := -1

	for i, c := range out {
		if v := version(c); v.Minor == cur.Minor && (def < 0 || v.GT(version(out[def]))) {
			def = i
		}
	}

	if def >= 0 {
		out[def].Default = true
	}

	return out, nil
}
