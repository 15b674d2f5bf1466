package release

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestTalosCandidates(t *testing.T) {
	c := func(v, g string, def bool) Candidate { return Candidate{Version: v, Group: g, Default: def} }
	tests := []struct {
		name               string
		current, recommend string
		available          []string
		want               []Candidate
	}{
		{
			name:    "patches newest first, newest patch the default, nothing older or equal",
			current: "v1.14.1", recommend: "v1.14.1",
			available: []string{"v1.13.4", "v1.14.0", "v1.14.1", "v1.14.3", "v1.14.2"},
			want:      []Candidate{c("v1.14.3", GroupPatch, true), c("v1.14.2", GroupPatch, false)},
		},
		{
			name:    "the recommended version is its own group, and the default when it is the newest patch",
			current: "v1.14.0", recommend: "v1.14.2",
			available: []string{"v1.14.1", "v1.14.2"},
			want:      []Candidate{c("v1.14.2", GroupRecommended, true), c("v1.14.1", GroupPatch, false)},
		},
		{
			name:    "next minor after the patches; a minor two up, pre-releases, junk and duplicates left out",
			current: "v1.13.2", recommend: "v1.14.1",
			available: []string{"v1.13.3", "v1.14.0", "v1.14.1", "1.14.1", "v1.14.2-beta.0", "v1.15.0", "latest", "v1.13.4", "v2.0.0"},
			want: []Candidate{
				c("v1.14.1", GroupRecommended, false),
				c("v1.13.4", GroupPatch, true), c("v1.13.3", GroupPatch, false),
				c("v1.14.0", GroupNextMinor, false),
			},
		},
		{
			name:    "no patch: no default",
			current: "v1.13.4", recommend: "v1.14.1",
			available: []string{"v1.14.0"},
			want:      []Candidate{c("v1.14.0", GroupNextMinor, false)},
		},
		{
			name:    "a next minor TalosPath refuses (unknown to machinery) is not offered",
			current: "v1.14.1", recommend: "v1.14.1",
			available: []string{"v1.15.0", "v1.15.1"},
			want:      nil,
		},
		{
			name:    "a next minor below the target's minimum host version is not offered",
			current: "v1.11.5", recommend: "v1.14.1",
			available: []string{"v1.11.6", "v1.12.0"},
			want:      []Candidate{c("v1.11.6", GroupPatch, true), c("v1.12.0", GroupNextMinor, false)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TalosCandidates(tt.current, tt.recommend, tt.available)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("TalosCandidates(%s) =\n %+v\nwant\n %+v", tt.current, got, tt.want)
			}
		})
	}
	if _, err := TalosCandidates("fourteen", "v1.14.1", nil); err == nil {
		t.Fatal("a running version that does not parse must be an error")
	}
}

func TestFetchVersions(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/versions":
			_, _ = w.Write([]byte(`["v1.14.0","v1.14.1"]`))
		case "/bad/versions":
			_, _ = w.Write([]byte(`{"no":"list"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	vs, err := FetchVersions(context.Background(), srv.Client(), srv.URL+"/")
	if err != nil || !reflect.DeepEqual(vs, []string{"v1.14.0", "v1.14.1"}) {
		t.Fatalf("FetchVersions = %v, %v", vs, err)
	}
	if _, err := FetchVersions(context.Background(), srv.Client(), srv.URL+"/bad"); err == nil {
		t.Fatal("a body that is not a list must be an error")
	}
	if _, err := FetchVersions(context.Background(), srv.Client(), srv.URL+"/missing"); err == nil {
		t.Fatal("a 404 must be an error")
	}
}
