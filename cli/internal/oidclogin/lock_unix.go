//go:build unix

package oidclogin

import (
	"fmt"
	"os"
	"syscall"
)

// lock takes an exclusive lock on the issuer's lock file, waiting for
// another process that holds it (one refresh at a time).
func (o *Options) lock() (func(), error) {
	if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.CacheDir, err)
	}
	f, err := os.OpenFile(o.path()+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the token lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking the token file: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
