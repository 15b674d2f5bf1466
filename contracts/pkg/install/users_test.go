package install_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

func TestCheckUIURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" means valid
	}{
		{"https://ichor.example.com", ""},
		{"https://ichor.example.com/", ""},
		{"https://127.0.0.1:8443", ""},
		{"http://ichor.example.com", "https URL"},
		{"ichor.example.com", "https URL"},
		{"https://", "https URL"},
		{"https://user:pw@ichor.example.com", "https URL"},
		{"https://ichor.example.com/console", "without a path"},
		{"https://ichor.example.com?x=1", "without a path"},
		{"https://ichor.example.com#top", "without a path"},
	} {
		err := install.CheckUIURL(tc.url)

		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckUIURL(%q) = %v, want nil", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "https://ichor.example.com")):
			t.Errorf("CheckUIURL(%q) = %v, want an error saying %q with an example", tc.url, err, tc.want)
		}
	}
}

func TestLoopbackUIURL(t *testing.T) {
	for _, tc := range []struct {
		url, port string
		ok        bool
	}{
		{"https://127.0.0.1:18443", "18443", true},
		{"https://127.3.2.1", "443", true},
		{"https://localhost:9443/", "9443", true},
		{"https://[::1]:8443", "8443", true},
		{"https://10.0.0.1:8443", "", false},
		{"https://ichor.example.com", "", false},
		{"::", "", false},
	} {
		port, ok := install.LoopbackUIURL(tc.url)
		if port != tc.port || ok != tc.ok {
			t.Errorf("LoopbackUIURL(%q) = %q, %v; want %q, %v", tc.url, port, ok, tc.port, tc.ok)
		}
	}
}

// uiDeployment is the manifest's ichor-ui Deployment.
func uiDeployment(t *testing.T) *unstructured.Unstructured {
	t.Helper()

	objs, err := install.Objects()
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == install.UIName {
			return o
		}
	}

	t.Fatal("the manifest has no ichor-ui Deployment")

	return nil
}

func TestWithIchorUsers(t *testing.T) {
	dep := uiDeployment(t)
	before := podSpec(t, install.UIName).Containers[0].Args

	if err := install.WithIchorUsers(dep, "https://ichor.example.com/"); err != nil {
		t.Fatal(err)
	}

	// Applied twice (an upgrade's run on the same objects), the arguments are not repeated.
	if err := install.WithIchorUsers(dep, "https://ichor.example.com"); err != nil {
		t.Fatal(err)
	}

	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, d); err != nil {
		t.Fatal(err)
	}

	args := d.Spec.Template.Spec.Containers[0].Args
	want := append(slices.Clone(before), "--ichor-users", "--issuer=https://ichor.example.com")

	if !slices.Equal(args, want) {
		t.Fatalf("args = %q, want %q", args, want)
	}

	if install.MustStaySingle(&d.Spec.Template.Spec) {
		t.Fatal("ichor-ui with Ichor's users and the shared signing key must stay single")
	}

	if err := install.WithIchorUsers(dep, "http://ichor.example.com"); err == nil {
		t.Fatal("a plain-http URL was taken")
	}

	other := &unstructured.Unstructured{}
	other.SetKind("Deployment")
	other.SetName(install.ControllerName)

	if err := install.WithIchorUsers(other, "https://ichor.example.com"); err == nil {
		t.Fatal("the controller's Deployment was given ichor-ui's flags")
	}
}
