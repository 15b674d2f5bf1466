package issuer

// Client is a registered public client (no secret; PKCE instead).
type Client struct {
	// ID is the client_id.
	ID string
	// RedirectURIs are compared exactly.
	RedirectURIs []string
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
