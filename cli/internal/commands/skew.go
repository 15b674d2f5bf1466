package commands

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// The version-skew rule (architecture, "Upgrades"): this CLI refuses writes
// when it is more than one minor release away from the Ichor the cluster
// runs (version.Skew). It is enforced here, in the client every command gets
// from connected, and nowhere else: a write of any kind (create, update,
// patch, apply, delete, and their subresources) is refused before it
// reaches the API server, so no command can forget the check. Reads go
// through, with one warning on stderr. The one write that does not go
// through the API server, `machine reclaim`'s Talos reset, asks mayWrite
// itself. `init` and the full-loss recovery (`restore --recover-cluster`)
// build their own clients and are not checked: they run where no Ichor is
// installed yet, and they install this CLI's release.

// skewCheck compares this CLI with the cluster's Ichor, once per invocation.
type skewCheck struct {
	// raw is the unwrapped client.
	raw client.WithWatch
	mu  sync.Mutex
	// done is true once the versions were compared; a failed read of the
	// IchorInstallation is not remembered, the next call reads it again.
	done bool
	// skew is the rule's refusal; nil when writes are allowed.
	skew error
	// warned prints the warning of the reads once.
	warned sync.Once
}

// guardWrites wraps the connection's client so that every write first
// passes the version-skew check and every read warns once when the versions
// are too far apart.
func (r *run) guardWrites() {
	raw := r.conn.Client
	r.skew = &skewCheck{raw: raw}
	read := func(ctx context.Context) {
		if r.checkSkew(ctx) {
			r.skew.warnOnce(r)
		}
	}
	write := func(ctx context.Context, obj runtime.Object) error {
		if isReview(raw, obj) {
			return nil
		}
		return r.mayWrite(ctx)
	}
	r.conn.Client = interceptor.NewClient(raw, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			read(ctx)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			read(ctx)
			return c.List(ctx, list, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			read(ctx)
			return c.Watch(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if err := write(ctx, nil); err != nil {
				return err
			}
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := write(ctx, obj); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			if err := write(ctx, nil); err != nil {
				return err
			}
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
	})
}

// compare compares the versions once per invocation, reading the
// IchorInstallation with the unwrapped client: the rule's refusal (nil when
// writes are allowed), or the error of reading the installation.
func (r *run) compare(ctx context.Context) error {
	s := r.skew
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		server, err := r.serverVersion(ctx, s.raw)
		if err != nil {
			return err
		}
		s.skew, s.done = version.Skew(version.Get().Version, server), true
	}
	return s.skew
}

// checkSkew reports whether the versions are too far apart; a failed read
// of the IchorInstallation is left to the command's own reads to report.
func (r *run) checkSkew(ctx context.Context) bool {
	_ = r.compare(ctx)
	r.skew.mu.Lock()
	defer r.skew.mu.Unlock()
	return r.skew.skew != nil
}

// mayWrite is nil when this CLI may write to the cluster, else the refusal:
// the versions are too far apart, or the IchorInstallation could not be read
// to compare them.
func (r *run) mayWrite(ctx context.Context) error {
	return r.compare(ctx)
}

// warnOnce prints the refusal as a warning, the first time a read sees it.
func (s *skewCheck) warnOnce(r *run) {
	s.warned.Do(func() { r.warnf("%s", s.skew) })
}

// refused is the refusal the check has found so far, without contacting the
// server: confirm uses it so that no one confirms a write that is refused.
func (r *run) refused() error {
	if r.skew == nil {
		return nil
	}
	r.skew.mu.Lock()
	defer r.skew.mu.Unlock()
	return r.skew.skew
}

// isReview reports whether obj is an authentication or authorization
// review (SelfSubjectReview, SelfSubjectAccessReview, ...): created, but
// never stored, so it is a question to the API server and not a write.
func isReview(c client.Client, obj runtime.Object) bool {
	if obj == nil {
		return false
	}
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return false
	}
	return gvk.Group == "authentication.k8s.io" || gvk.Group == "authorization.k8s.io"
}
