package issuer

import (
	"net"
	"net/url"
	"slices"
	"strconv"
)

// Client is a registered public client (no secret; PKCE instead).
type Client struct {
	// ID is the client_id.
	ID string
	// RedirectURIs are compared exactly.
	RedirectURIs []string
	// LoopbackPaths, for a native application (the CLI), are the paths of
	// the redirect URIs it may name on the loopback interface with any port:
	// http://127.0.0.1:PORT/PATH or http://[::1]:PORT/PATH (RFC 8252 §7.3,
	// the port is the one the application listens on for this sign-in;
	// "localhost" is not accepted, §8.3).
	LoopbackPaths []string
}

// allows reports whether redirect is one of the client's redirect URIs.
func (c *Client) allows(redirect string) bool {
	if slices.Contains(c.RedirectURIs, redirect) {
		return true
	}
	if len(c.LoopbackPaths) == 0 {
		return false
	}
	u, err := url.Parse(redirect)
	if err != nil || u.Scheme != "http" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || !slices.Contains(c.LoopbackPaths, u.Path) {
		return false
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
		return false
	}
	port, err := strconv.Atoi(u.Port())
	return err == nil && port > 0 && port < 65536
}

// client returns the registered client id.
func (i *Issuer) client(id string) (*Client, bool) {
	for n := range i.opts.Clients {
		if i.opts.Clients[n].ID == id {
			return &i.opts.Clients[n], true
		}
	}
	return nil, false
}
