package issuer

import "testing"

// TestLoopbackRedirects: a native client's redirect URI is accepted on
// 127.0.0.1 or [::1] with any port and one of its paths over plain http
// (RFC 8252 §7.3), and nothing else: not localhost (§8.3), not another
// host, path, scheme, query or a missing port; a client without loopback
// paths accepts only its registered URIs.
func TestLoopbackRedirects(t *testing.T) {
	cli := &Client{ID: "ichor-cli", LoopbackPaths: []string{"/callback"}}
	for redirect, want := range map[string]bool{
		"http://127.0.0.1:49152/callback":     true,
		"http://127.0.0.1:1/callback":         true,
		"http://[::1]:8000/callback":          true,
		"http://localhost:8000/callback":      false,
		"http://127.0.0.2:8000/callback":      false,
		"http://10.0.0.1:8000/callback":       false,
		"https://127.0.0.1:8000/callback":     false,
		"http://127.0.0.1/callback":           false,
		"http://127.0.0.1:0/callback":         false,
		"http://127.0.0.1:8000/other":         false,
		"http://127.0.0.1:8000/callback?":     true,
		"http://127.0.0.1:8000/callback?a=b":  false,
		"http://127.0.0.1:8000/callback#f":    false,
		"http://u@127.0.0.1:8000/callback":    false,
		"http://127.0.0.1:8000/callback/../x": false,
	} {
		if got := cli.allows(redirect); got != want {
			t.Errorf("%s: allowed %v, want %v", redirect, got, want)
		}
	}
	console := &Client{ID: "ichor-ui", RedirectURIs: []string{"https://ui.test/auth/callback"}}
	if !console.allows("https://ui.test/auth/callback") || console.allows("http://127.0.0.1:8000/callback") {
		t.Error("a client without loopback paths must accept exactly its registered URIs")
	}
}
