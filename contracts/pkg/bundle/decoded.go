package bundle

import (
	"crypto/sha256"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// decodedMax is how many decoded bundles are kept: one per cluster, and
// the next one of a rotation.
const decodedMax = 16

// decoded are the bundles Decode validated, by decodedKey.
var decoded = &decodedCache{byKey: map[[sha256.Size]byte]*secrets.Bundle{}}

// decodedCache keeps at most decodedMax bundles, dropping the oldest kept.
type decodedCache struct {
	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*secrets.Bundle
	order [][sha256.Size]byte
}

// decodedKey names a bundle's bytes under a version contract.
func decodedKey(data []byte, versionContract string) [sha256.Size]byte {
	h := sha256.New()
	_, _ = h.Write([]byte(versionContract))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(data)

	var k [sha256.Size]byte

	copy(k[:], h.Sum(nil))

	return k
}

func (c *decodedCache) get(k [sha256.Size]byte) *secrets.Bundle {
	c.mu.Lock()
	defer c.mu.Unlock()

	return c.byKey[k]
}

func (c *decodedCache) put(k [sha256.Size]byte, b *secrets.Bundle) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if _, ok := c.byKey[k]; ok {
		return
	}

	if len(c.order) >= decodedMax {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}

	c.byKey[k] = b
	c.order = append(c.order, k)
}

// copyBundle is a copy of b whose parts (cluster, secrets, trustd, certs)
// are its own: replacing one of them (next.Certs.OS = …) leaves b as it
// was. The certificates and keys themselves are shared; nothing changes
// them in place.
func copyBundle(b *secrets.Bundle) *secrets.Bundle {
	c := *b

	if b.Cluster != nil {
		v := *b.Cluster
		c.Cluster = &v
	}

	if b.Secrets != nil {
		v := *b.Secrets
		c.Secrets = &v
	}

	if b.TrustdInfo != nil {
		v := *b.TrustdInfo
		c.TrustdInfo = &v
	}

	if b.Certs != nil {
		v := *b.Certs
		c.Certs = &v
	}

	return &c
}
