// Package contents reads what an etcd snapshot holds without running etcd:
// the latest value of every key, as the Kubernetes API server stored it. The
// full-loss recovery reads the cluster's own custom resources (the
// TalosCluster, its TalosMachines and patches) from the checked snapshot
// before any machine is touched, to know which machines to rebuild and how,
// and the tests compare a recovered cluster's keys with the snapshot's.
package contents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// The layout of etcd's backend (go.etcd.io/etcd/server/v3 storage/schema
// bucket.go: the "key" bucket; storage/mvcc/revision.go: a key is the
// revision, 8 bytes main, '_', 8 bytes sub, and a trailing 't' marks a
// tombstone; the value is the mvccpb.KeyValue). Keys sort by revision, so a
// forward walk leaves the latest value of every key.
const (
	keyBucket         = "key"
	revBytesLen       = 8 + 1 + 8
	markedRevBytesLen = revBytesLen + 1
	markTombstone     = 't'
)

// Contents is the latest value of every live key of a snapshot.
type Contents struct {
	// Revision is the highest revision the snapshot holds.
	Revision int64
	values   map[string][]byte
}

// Read opens a snapshot file (etcd's database, a sha256 trailer after it is
// ignored) read-only and reads every live key.
func Read(path string) (*Contents, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open the etcd snapshot's database: %w", err)
	}

	defer db.Close() //nolint:errcheck // read-only

	c := &Contents{values: map[string][]byte{}}

	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(keyBucket))
		if b == nil {
			return errors.New("the snapshot has no key bucket: it is not an etcd v3 database")
		}

		return b.ForEach(func(rev, v []byte) error {
			if len(rev) != revBytesLen && len(rev) != markedRevBytesLen {
				return fmt.Errorf("a key of %d bytes in the key bucket is not a revision", len(rev))
			}

			kv := &mvccpb.KeyValue{}
			if err := proto.Unmarshal(v, kv); err != nil {
				return fmt.Errorf("a value in the key bucket does not decode: %w", err)
			}

			if kv.ModRevision > c.Revision {
				c.Revision = kv.ModRevision
			}

			if len(rev) == markedRevBytesLen && rev[markedRevBytesLen-1] == markTombstone {
				delete(c.values, string(kv.Key))

				return nil
			}

			c.values[string(kv.Key)] = kv.Value

			return nil
		})
	})
	if err != nil {
		return nil, err
	}

	return c, nil
}

// Keys returns the live keys under prefix, sorted.
func (c *Contents) Keys(prefix string) []string {
	var out []string

	for k := range c.values {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}

	sort.Strings(out)

	return out
}

// Get is the value of key, and whether it is live.
func (c *Contents) Get(key string) ([]byte, bool) {
	v, ok := c.values[key]

	return v, ok
}

// RegistryPrefix is where the Kubernetes API server stores objects
// (k8s.io/apiserver storagebackend: --etcd-prefix, default /registry).
const RegistryPrefix = "/registry/"

// ObjectKey is one object's key as the API server stores it:
// /registry/<resource>/[<namespace>/]<name> for the core group and
// /registry/<group>/<resource>/[<namespace>/]<name> for custom resources.
type ObjectKey struct {
	Key, Group, Resource, Namespace, Name string
}

// NamespacedObjects lists the keys of namespaced custom resources of group
// (its objects are JSON: custom resources are always stored so).
func (c *Contents) NamespacedObjects(group, resource string) []ObjectKey {
	prefix := RegistryPrefix + group + "/" + resource + "/"

	var out []ObjectKey

	for _, k := range c.Keys(prefix) {
		ns, name, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		if !ok || strings.Contains(name, "/") {
			continue
		}

		out = append(out, ObjectKey{Key: k, Group: group, Resource: resource, Namespace: ns, Name: name})
	}

	return out
}

// DecodeJSON decodes the JSON object stored under key into obj; a value in
// another encoding (the API server's protobuf, "k8s\x00…", or an encrypted
// one, "k8s:enc:…") is refused.
func (c *Contents) DecodeJSON(key string, obj any) error {
	v, ok := c.values[key]
	if !ok {
		return fmt.Errorf("the snapshot holds no %s", key)
	}

	if !bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")) {
		return fmt.Errorf("%s is not stored as JSON in the snapshot", key)
	}

	if err := json.Unmarshal(v, obj); err != nil {
		return fmt.Errorf("%s does not decode: %w", key, err)
	}

	return nil
}
