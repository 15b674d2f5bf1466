package release

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// Rule: Kubernetes candidates are final releases of the running minor and
// the next one that the cluster's Talos supports; flavoured and
// pre-release tags are left out.
func TestKubernetesCandidates(t *testing.T) {
	c := func(v, g string, def bool) Candidate { return Candidate{Version: v, Group: g, Default: def} }
	tags := []string{"v1.35.9", "v1.36.2", "v1.36.3", "v1.36.4", "v1.36.4-fat", "v1.37.0", "v1.37.2", "v1.37.3-rc.0", "v1.38.0", "latest", "1.37.1"}

	got, err := KubernetesCandidates("1.36.3", "1.37.2", "v1.14.1", tags)
	if err != nil {
		t.Fatal(err)
	}

	want := []Candidate{
		c("v1.37.2", GroupRecommended, false),
		c("v1.36.4", GroupPatch, true),
		c("v1.37.1", GroupNextMinor, false), c("v1.37.0", GroupNextMinor, false),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("KubernetesCandidates =\n %+v\nwant\n %+v", got, want)
	}

	// Talos 1.14 supports 1.32–1.37: on 1.37.x, 1.38 is not offered.
	if got, _ := KubernetesCandidates("v1.37.0", "1.37.2", "v1.14.1", tags); !reflect.DeepEqual(got, []Candidate{c("v1.37.2", GroupRecommended, true), c("v1.37.1", GroupPatch, false)}) {
		t.Fatalf("on 1.37.0: %+v", got)
	}

	if _, err := KubernetesCandidates("seven", "1.37.2", "v1.14.1", tags); err == nil {
		t.Fatal("a running version that does not parse must be an error")
	}
}

// Rule: the tag list is read with the OCI distribution API, following an
// anonymous bearer-token challenge as ghcr.io sends it.
func TestFetchKubernetesVersions(t *testing.T) {
	var srv *httptest.Server

	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			if r.URL.Query().Get("scope") != "repository:siderolabs/kubelet:pull" || r.URL.Query().Get("service") != "ghcr.io" {
				http.Error(w, "bad scope", http.StatusBadRequest)

				return
			}

			_, _ = w.Write([]byte(`{"token":"anon"}`))
		case "/v2/siderolabs/kubelet/tags/list":
			if r.Header.Get("Authorization") != "Bearer anon" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="ghcr.io",scope="repository:siderolabs/kubelet:pull"`)
				w.WriteHeader(http.StatusUnauthorized)

				return
			}

			_, _ = w.Write([]byte(`{"name":"siderolabs/kubelet","tags":["v1.36.3","v1.37.2"]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	vs, err := FetchKubernetesVersions(context.Background(), srv.Client(), srv.URL+"/")
	if err != nil || !reflect.DeepEqual(vs, []string{"v1.36.3", "v1.37.2"}) {
		t.Fatalf("FetchKubernetesVersions = %v, %v", vs, err)
	}

	if _, err := FetchKubernetesVersions(context.Background(), srv.Client(), srv.URL+"/missing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("a missing registry: %v", err)
	}
}
