package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// VersityGWVersion is the versitygw the Taskfile builds (tools/assets/versitygw).
const VersityGWVersion = "v1.8.0"

// VersityGWEnv names the variable that points at the versitygw binary; the
// Taskfile sets it, and without it the cache's copy is used.
const VersityGWEnv = "ICHOR_VERSITYGW"

// VersityGWPath returns the versitygw binary, or an error that says how to build it.
func VersityGWPath() (string, error) {
	p := os.Getenv(VersityGWEnv)
	if p == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}

		p = filepath.Join(home, ".cache", "ichor", "bin", "versitygw-"+VersityGWVersion)
	}

	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("the S3 server for tests (versitygw %s) is missing at %s: build it with `go tool task tools:versitygw`", VersityGWVersion, p)
	}

	return p, nil
}

// S3 is a real S3 server (versitygw, POSIX backend) on loopback, for the
// backup tests and the demo.
type S3 struct {
	// Endpoint is the server's URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKeyID and SecretAccessKey are its root credentials.
	AccessKeyID, SecretAccessKey string
	// Dir holds the buckets (one directory each).
	Dir string
	// Log is the server's output.
	Log string

	cmd    *exec.Cmd
	exited chan error
}

// StartS3 starts versitygw on a free loopback port with its data under dir
// and fresh root credentials, creates the buckets and returns once it
// answers. Call Stop when done. listen, when not empty, is the address
// (127.0.0.1:PORT) to serve on.
func StartS3(ctx context.Context, dir, listen string, buckets ...string) (*S3, error) {
	bin, err := VersityGWPath()
	if err != nil {
		return nil, err
	}

	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}

	if listen == "" {
		if listen, err = freeLoopbackPort(ctx); err != nil {
			return nil, err
		}
	}

	s := &S3{
		Endpoint: "http://" + listen, AccessKeyID: "ichor-" + rand.Text()[:8], SecretAccessKey: rand.Text(),
		Dir: data, Log: filepath.Join(dir, "versitygw.log"), exited: make(chan error, 1),
	}

	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}

	// The credentials go through the environment, not the command line
	// (which every local user can read).
	s.cmd = exec.CommandContext(context.WithoutCancel(ctx), bin, "--port", listen, "--quiet", "posix", data) //nolint:gosec // the built test binary
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKeyID, "ROOT_SECRET_ACCESS_KEY="+s.SecretAccessKey)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf

	if err := s.cmd.Start(); err != nil {
		_ = logf.Close()

		return nil, fmt.Errorf("starting versitygw: %w", err)
	}

	go func() {
		s.exited <- s.cmd.Wait()
		_ = logf.Close()
	}()

	if err := s.ready(ctx, buckets); err != nil {
		_ = s.Stop()

		return nil, err
	}

	return s, nil
}

// Client is a minio-go client of the server with its root credentials.
func (s *S3) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint[len("http://"):], &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, ""), BucketLookup: minio.BucketLookupPath,
	})
}

// ready waits until the server answers, then creates the buckets.
func (s *S3) ready(ctx context.Context, buckets []string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}

	deadline := time.Now().Add(30 * time.Second)

	for {
		_, err := c.ListBuckets(ctx)
		if err == nil {
			break
		}

		select {
		case werr := <-s.exited:
			return fmt.Errorf("versitygw exited at start (%w); its log is %s", werr, s.Log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer at %s within 30s (%w); its log is %s", s.Endpoint, err, s.Log)
		}
	}

	for _, b := range buckets {
		// A server restarted on its old data keeps its buckets.
		if ok, err := c.BucketExists(ctx, b); err == nil && ok {
			continue
		}

		if err := c.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
			return fmt.Errorf("creating bucket %s: %w", b, err)
		}
	}

	return nil
}

// Stop stops the server.
func (s *S3) Stop() error {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return nil
	}

	_ = s.cmd.Process.Signal(os.Interrupt)

	var exit error

	select {
	case exit = <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		exit = <-s.exited
	}

	// Stop again is a no-op. The exit status is the signal's: how it stops.
	s.cmd = nil
	_ = exit

	return nil
}

func freeLoopbackPort(ctx context.Context) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}

	addr, ok := l.Addr().(*net.TCPAddr)
	if cerr := l.Close(); cerr != nil || !ok {
		return "", errors.Join(cerr, errors.New("no TCP address"))
	}

	return net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port)), nil
}
