// Package verify checks an etcd snapshot with etcd's own code before it is
// stored, and again before it is restored.
package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Verified is what the check of a snapshot file found.
type Verified struct {
	// Size is the file's size, trailer included.
	Size int64
	// SHA256 is the digest of the whole file (as stored before encryption).
	SHA256 string
	// Revision, Hash and TotalKeys are etcd's view of the database
	// (`etcdutl snapshot status`).
	Revision  int64
	Hash      uint32
	TotalKeys int
}

// ErrCorrupt marks a snapshot that failed its check.
var ErrCorrupt = errors.New("the etcd snapshot is corrupt")

// trailerAlign is the size a snapshot without its sha256 trailer is a
// multiple of: etcd pads the database to 512 bytes before it appends the
// digest (etcdutl/snapshot/v3_snapshot.go, hasChecksum).
const trailerAlign = 512

// Snapshot checks a snapshot file the way etcd does before it restores one,
// and reads what it holds:
//
//   - the file must end with the sha256 of what comes before it, as etcd's
//     maintenance Snapshot (and so Talos's EtcdSnapshot) writes it; etcdutl's
//     restore refuses a file whose digest does not match
//     (etcdutl/snapshot/v3_snapshot.go, copyAndVerifyDB);
//   - etcd's own snapshot code must open the database, pass bbolt's
//     consistency check and hash every bucket (etcdutl snapshot status:
//     snapshot.NewV3(...).Status);
//   - the database must hold a revision.
func Snapshot(path string) (*Verified, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}

	defer f.Close() //nolint:errcheck // read-only

	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}

	size := fi.Size()
	if size < sha256.Size+trailerAlign || size%trailerAlign != sha256.Size {
		return nil, fmt.Errorf("%w: %d bytes is not a database followed by its sha256 (etcd's snapshot stream was cut short?)", ErrCorrupt, size)
	}

	whole, body := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(whole, body), io.LimitReader(f, size-sha256.Size)); err != nil {
		return nil, err
	}

	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return nil, err
	}

	_, _ = whole.Write(trailer)

	if !bytes.Equal(trailer, body.Sum(nil)) {
		return nil, fmt.Errorf("%w: its sha256 trailer does not match its contents", ErrCorrupt)
	}

	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd cannot read the database: %w", ErrCorrupt, err)
	}

	if st.Revision <= 0 {
		return nil, fmt.Errorf("%w: the database holds no key, so no revision (an etcd nothing was ever written to)", ErrCorrupt)
	}

	return &Verified{Size: size, SHA256: hex.EncodeToString(whole.Sum(nil)), Revision: st.Revision, Hash: st.Hash, TotalKeys: st.TotalKey}, nil
}
