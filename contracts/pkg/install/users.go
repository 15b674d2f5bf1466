package install

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// UIURLAnnotation records on the IchorInstallation the https URL browsers
// reach ichor-ui at (`ichor init --ui-url`, the installer's --ui-url), until
// the installation's settings carry it. With it, every installer run installs
// ichor-ui as the OIDC issuer of Ichor's own users at that URL.
const UIURLAnnotation = "ichor.maesh.dev/ui-external-url"

// CheckUIURL says what is wrong with an ichor-ui URL: it must be an https
// URL with a host and no path beyond "/", query or fragment (it is the
// issuer of ichor-ui's tokens, and the console's callback hangs off it).
func CheckUIURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return fmt.Errorf("%q: give the https URL browsers reach ichor-ui at, for example https://ichor.example.com", raw)
	}

	if strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: give ichor-ui's URL without a path, query or fragment, for example https://ichor.example.com", raw)
	}

	return nil
}

// LoopbackUIURL reports whether the URL is on this machine's loopback
// (127.0.0.0/8, ::1 or localhost): such a URL is reached through `ichor ui`'s
// port-forward on its port, and port is that port ("443" when none is given).
func LoopbackUIURL(raw string) (port string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", false
	}

	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", false
	}

	if port = u.Port(); port == "" {
		port = "443"
	}

	return port, true
}

// WithIchorUsers makes the ichor-ui Deployment sign in Ichor's own users as
// the OIDC issuer at uiURL (architecture, "Trust": ichorUI.users.enabled;
// its flags --ichor-users and --issuer). Its replicas share the sessions and
// the signing key, so it keeps two replicas where there are two nodes.
// An --issuer or --ichor-users argument already there is replaced.
func WithIchorUsers(dep *unstructured.Unstructured, uiURL string) error {
	if err := CheckUIURL(uiURL); err != nil {
		return err
	}

	if dep.GetKind() != "Deployment" || dep.GetName() != UIName {
		return fmt.Errorf("%s/%s is not the %s Deployment", dep.GetKind(), dep.GetName(), UIName)
	}

	containers, found, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil || !found || len(containers) == 0 {
		return errors.New("the ichor-ui Deployment has no containers")
	}

	c, ok := containers[0].(map[string]any)
	if !ok {
		return errors.New("the ichor-ui Deployment's first container is not an object")
	}

	old, _, _ := unstructured.NestedStringSlice(c, "args")
	args := make([]any, 0, len(old)+2)

	for _, a := range old {
		if a == "--ichor-users" || strings.HasPrefix(a, "--ichor-users=") || strings.HasPrefix(a, "--issuer=") {
			continue
		}

		args = append(args, a)
	}

	c["args"] = append(args, "--ichor-users", "--issuer="+strings.TrimSuffix(uiURL, "/"))
	containers[0] = c

	return unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers")
}
