package talosemu

import (
	"fmt"
	"net/http"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultReleases are the Talos releases the world's release source offers
// until SetReleases changes them.
var DefaultReleases = []string{
	"v1.12.0", "v1.13.0", "v1.13.4",
	"v1.14.0", "v1.14.1", "v1.14.2", "v1.14.3",
}

// releaseState is the world's release source: the Talos releases its
// emulated Image Factory lists at GET /versions on the control API, and the
// only installer tags the emulated registry has (an Upgrade to another
// version fails as a pull of a missing image does).
type releaseState struct {
	relMu    sync.Mutex
	releases []string
}

// Releases are the Talos releases the world's release source offers.
func (w *World) Releases() []string {
	w.relMu.Lock()
	defer w.relMu.Unlock()

	if w.releases == nil {
		return slices.Clone(DefaultReleases)
	}

	return slices.Clone(w.releases)
}

// SetReleases changes the releases the world's release source offers.
func (w *World) SetReleases(vs []string) {
	w.relMu.Lock()
	w.releases = slices.Clone(vs)
	w.relMu.Unlock()
}

// ReleaseSource is the base URL of the world's emulated Image Factory: GET
// ReleaseSource()+"/versions" answers the releases as a JSON list, as
// factory.talos.dev does. It is the control API ("" when disabled).
func (w *World) ReleaseSource() string { return w.ControlURL() }

// checkInstallerImage refuses an installer of a version the release source
// does not offer: the image does not exist, so pulling it fails.
func (w *World) checkInstallerImage(p *pendingUpgrade) error {
	if slices.Contains(w.Releases(), p.Version) {
		return nil
	}

	return fmt.Errorf("failed to pull image %q: %s: not found (the release source offers %v)", p.Image, p.Image, w.Releases())
}

// lifecycleUpgradeError is the LifecycleService.Upgrade error of an installer
// that cannot be pulled (t:internal/app/lifecycle/lifecycle.go: a failed
// installer run is Internal "upgrade failed: …").
func lifecycleUpgradeError(err error) error {
	return status.Error(codes.Internal, "upgrade failed: "+err.Error())
}

// releaseRoutes serves the release source on the control API: GET /versions
// (the Image Factory's shape) and PUT /versions (a JSON list) to change it.
func (w *World) releaseRoutes(handle func(pattern string, fn func(r *http.Request) (any, error))) {
	handle("GET /versions", func(*http.Request) (any, error) { return w.Releases(), nil })
	handle("PUT /versions", func(r *http.Request) (any, error) {
		var vs []string
		if err := decodeOptional(r, &vs); err != nil {
			return nil, err
		}

		w.SetReleases(vs)

		return w.Releases(), nil
	})
}
