// Package store is the S3 side of etcd backups: one backup's bucket, through
// minio-go, holding objects in the layout of package etcdbackup.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
)

// Credential keys of the Secret a backup's s3.credentialsRef names.
const (
	AccessKeyIDKey     = "accessKeyID"
	SecretAccessKeyKey = "secretAccessKey"
)

// Destination is where a backup's objects go.
type Destination struct {
	// Endpoint is the S3 API's URL (http or https, no path).
	Endpoint string
	// Bucket, Prefix and Region are the backup's spec.s3 fields.
	Bucket, Prefix, Region string
	// AccessKeyID and SecretAccessKey are the credentials; never logged,
	// never in an error.
	AccessKeyID, SecretAccessKey string
	// Transport, when set, carries the requests (a custom CA, tests).
	Transport http.RoundTripper
}

// Store is a connection to one backup's bucket.
type Store struct {
	c              *minio.Client
	bucket, prefix string
	secrets        []string
}

// Open connects to the destination. It does not reach the network.
func Open(d Destination) (*Store, error) {
	host, secure, err := etcdbackup.ParseEndpoint(d.Endpoint)
	if err != nil {
		return nil, err
	}

	if d.AccessKeyID == "" || d.SecretAccessKey == "" {
		return nil, fmt.Errorf("the credentials need both %s and %s", AccessKeyIDKey, SecretAccessKeyKey)
	}

	c, err := minio.New(host, &minio.Options{
		Creds:     credentials.NewStaticV4(d.AccessKeyID, d.SecretAccessKey, ""),
		Secure:    secure,
		Region:    d.Region,
		Transport: d.Transport,
		// Path-style requests work with every S3-compatible server.
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to the S3 endpoint %s: %w", d.Endpoint, err)
	}

	return &Store{c: c, bucket: d.Bucket, prefix: d.Prefix, secrets: []string{d.AccessKeyID, d.SecretAccessKey}}, nil
}

// scrub keeps the credentials out of an error: S3 servers echo the access
// key in some answers.
func (s *Store) scrub(err error) error {
	if err == nil {
		return nil
	}

	msg := err.Error()
	for _, sec := range s.secrets {
		if sec != "" {
			msg = strings.ReplaceAll(msg, sec, "[redacted]")
		}
	}

	if msg == err.Error() {
		return err
	}

	return errors.New(msg)
}

// Check reads the bucket, so that a wrong endpoint, credential or bucket
// shows before a snapshot is taken.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.scrub(fmt.Errorf("reach bucket %q: %w", s.bucket, err))
	}

	if !ok {
		return fmt.Errorf("bucket %q does not exist; create it, or name an existing one in spec.s3.bucket", s.bucket)
	}

	return nil
}

// List returns a cluster's snapshots, newest first.
func (s *Store) List(ctx context.Context, namespace, cluster string) ([]etcdbackup.Object, error) {
	var out []etcdbackup.Object

	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: etcdbackup.SnapshotsPrefix(s.prefix, namespace, cluster), Recursive: true}) {
		if o.Err != nil {
			return nil, s.scrub(fmt.Errorf("list the snapshots in bucket %q: %w", s.bucket, o.Err))
		}

		t, rev, ok := etcdbackup.ParseSnapshotKey(o.Key)
		if !ok {
			continue
		}

		out = append(out, etcdbackup.Object{Key: o.Key, TakenAt: t, Revision: rev, Size: o.Size})
	}

	sort.Slice(out, func(i, j int) bool { return out[i].TakenAt.After(out[j].TakenAt) })

	return out, nil
}

// Put uploads one encrypted snapshot of size bytes with its metadata.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, m *etcdbackup.Metadata) error {
	_, err := s.c.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream", UserMetadata: m.Headers(),
	})
	if err != nil {
		return s.scrub(fmt.Errorf("upload %s to bucket %q: %w", key, s.bucket, err))
	}

	return nil
}

// Stat reads one snapshot's size and metadata.
func (s *Store) Stat(ctx context.Context, key string) (int64, *etcdbackup.Metadata, error) {
	info, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, nil, s.scrub(fmt.Errorf("read %s in bucket %q: %w", key, s.bucket, err))
	}

	m, err := etcdbackup.ParseMetadata(info.UserMetadata)
	if err != nil {
		return info.Size, nil, fmt.Errorf("%s in bucket %q: %w", key, s.bucket, err)
	}

	return info.Size, m, nil
}

// Get opens one snapshot object for reading (the restore paths).
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.scrub(fmt.Errorf("read %s in bucket %q: %w", key, s.bucket, err))
	}

	return o, nil
}

// Delete removes one snapshot.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return s.scrub(fmt.Errorf("delete %s in bucket %q: %w", key, s.bucket, err))
	}

	return nil
}

// PutMarker writes a restore's marker (etcdbackup.Marker) under key and
// reads it back: a restore goes on only once its record is stored.
func (s *Store) PutMarker(ctx context.Context, key string, m *etcdbackup.Marker) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}

	if _, err := s.c.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		ContentType: "application/json",
	}); err != nil {
		return s.scrub(fmt.Errorf("write the restore marker %s to bucket %q: %w", key, s.bucket, err))
	}

	got, err := s.GetMarker(ctx, key)
	if err != nil {
		return err
	}

	if got == nil || got.Sequence != m.Sequence || got.Step != m.Step || got.Phase != m.Phase {
		return fmt.Errorf("the restore marker %s in bucket %q does not read back as written", key, s.bucket)
	}

	return nil
}

// GetMarker reads a restore's marker; nil when there is none under key.
func (s *Store) GetMarker(ctx context.Context, key string) (*etcdbackup.Marker, error) {
	o, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.scrub(fmt.Errorf("read the restore marker %s in bucket %q: %w", key, s.bucket, err))
	}

	defer o.Close() //nolint:errcheck // read-only

	data, err := io.ReadAll(io.LimitReader(o, 1<<20))
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, nil
		}

		return nil, s.scrub(fmt.Errorf("read the restore marker %s in bucket %q: %w", key, s.bucket, err))
	}

	m, err := etcdbackup.DecodeMarker(data)
	if err != nil {
		return nil, fmt.Errorf("%s in bucket %q: %w", key, s.bucket, err)
	}

	return m, nil
}

// ListMarkers returns the keys of a cluster's restore markers.
func (s *Store) ListMarkers(ctx context.Context, namespace, cluster string) ([]string, error) {
	var out []string

	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: etcdbackup.RestorePrefix(s.prefix, namespace, cluster), Recursive: true}) {
		if o.Err != nil {
			return nil, s.scrub(fmt.Errorf("list the restore markers in bucket %q: %w", s.bucket, o.Err))
		}

		if _, _, ok := etcdbackup.ParseMarkerKey(o.Key); ok {
			out = append(out, o.Key)
		}
	}

	sort.Strings(out)

	return out, nil
}

// Prefix is the backup's key prefix (spec.s3.prefix).
func (s *Store) Prefix() string { return s.prefix }
