// Package fetch reads a stored snapshot back for a restore: it downloads the
// encrypted object, decrypts it with the restorer's age identity and checks
// it, end to end, against what the object says about itself (the digests of
// the object and of the plain snapshot) and with etcd's own snapshot code
// (the revision and hash), before anything is stopped. The live restore
// (the operation controller) and the full-loss recovery (the CLI) both use it.
package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"filippo.io/age"

	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/verify"
)

// ErrMismatch marks a snapshot whose contents differ from what its metadata
// says: changed or cut in the store, or the metadata of another snapshot.
var ErrMismatch = errors.New("the snapshot does not match its metadata")

// Snapshot is a snapshot downloaded, decrypted and checked.
type Snapshot struct {
	// Path is the plain snapshot (etcd's stream, trailer included), 0600.
	Path string
	// Meta is what the object says about itself.
	Meta *etcdbackup.Metadata
	// Verified is what etcd's code found in it.
	Verified *verify.Verified
}

// Store is what Fetch reads from (store.Store).
type Store interface {
	Stat(ctx context.Context, key string) (int64, *etcdbackup.Metadata, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
}

var _ Store = (*store.Store)(nil)

// Fetch downloads the snapshot key into dir (the plain snapshot only; the
// encrypted stream is hashed on the way), decrypts it with identities and
// checks it. On any error nothing is left in dir.
func Fetch(ctx context.Context, st Store, key string, identities []age.Identity, dir string) (*Snapshot, error) {
	size, meta, err := st.Stat(ctx, key)
	if err != nil {
		return nil, err
	}

	if meta.Encryption != etcdbackup.EncryptionAge {
		return nil, fmt.Errorf("%s is encrypted with %q; this release decrypts only age", key, meta.Encryption)
	}

	obj, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}

	defer obj.Close() //nolint:errcheck // read-only

	plain := filepath.Join(dir, "snapshot.db")

	out, err := os.OpenFile(plain, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}

	ok := false

	defer func() {
		if !ok {
			_ = os.Remove(plain)
		}
	}()

	objHash, plainHash := sha256.New(), sha256.New()
	counted := &countReader{r: io.TeeReader(obj, objHash)}

	dec, err := etcdbackup.Decrypt(counted, identities)
	if err != nil {
		_ = out.Close()

		return nil, err
	}

	_, err = io.Copy(io.MultiWriter(out, plainHash), dec)
	if cerr := out.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return nil, fmt.Errorf("download and decrypt %s: %w (age authenticates every chunk: the object was changed or cut)", key, err)
	}

	// The whole object is hashed, even bytes age did not need.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return nil, fmt.Errorf("download %s: %w", key, err)
	}

	if counted.n != size || hex.EncodeToString(objHash.Sum(nil)) != meta.ObjectSHA256 {
		return nil, fmt.Errorf("%w: %s downloaded as %d bytes with another sha256 than the %d bytes its metadata names", ErrMismatch, key, counted.n, size)
	}

	if got := hex.EncodeToString(plainHash.Sum(nil)); got != meta.SnapshotSHA256 {
		return nil, fmt.Errorf("%w: the decrypted snapshot's sha256 is not the one its metadata names", ErrMismatch)
	}

	v, err := verify.Snapshot(plain)
	if err != nil {
		return nil, err
	}

	if v.Revision != meta.Revision || v.Hash != meta.EtcdHash {
		return nil, fmt.Errorf("%w: etcd reads revision %d and hash %d, the metadata names revision %d and hash %d",
			ErrMismatch, v.Revision, v.Hash, meta.Revision, meta.EtcdHash)
	}

	ok = true

	return &Snapshot{Path: plain, Meta: meta, Verified: v}, nil
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)

	return n, err
}
