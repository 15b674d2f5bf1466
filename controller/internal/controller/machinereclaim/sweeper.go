package machinereclaim

import (
	"context"
	"encoding/base64"
	"regexp"
	"strings"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// DefaultSweepInterval is how often the Sweeper looks for stale credentials.
const DefaultSweepInterval = time.Minute

// Sweeper deletes every Secret of type ichor.maesh.dev/foreign-talosconfig
// older than the maximum reclaim TTL, whether or not a MachineReclaim still
// names it: the foreign credential is the one credential Ichor deletes by
// time. It is a manager Runnable; it lists Secrets uncached, by type.
type Sweeper struct {
	// Client deletes; Reader lists (uncached: mgr.GetAPIReader()).
	Client client.Client
	Reader client.Reader
	// MaxAge is the age past which a credential is deleted; zero means guard.MaxReclaimTTL.
	MaxAge time.Duration
	// Interval is the sweep period; zero means DefaultSweepInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SetupWithManager adds the sweeper to the manager.
func (s *Sweeper) SetupWithManager(mgr ctrl.Manager) error {
	if s.Client == nil {
		s.Client = mgr.GetClient()
	}

	if s.Reader == nil {
		s.Reader = mgr.GetAPIReader()
	}

	return mgr.Add(s)
}

// NeedLeaderElection makes the sweeper run on the leader only.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps at once and then every Interval until ctx ends.
func (s *Sweeper) Start(ctx context.Context) error {
	interval := s.Interval
	if interval == 0 {
		interval = DefaultSweepInterval
	}

	log := ctrl.LoggerFrom(ctx).WithName("foreign-talosconfig-sweeper")
	t := time.NewTicker(interval)

	defer t.Stop()

	for {
		if _, err := s.Sweep(ctx); err != nil {
			log.Error(err, "sweeping foreign talosconfigs")
		}

		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sweep deletes the stale credentials once and returns how many it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	maxAge := s.MaxAge
	if maxAge == 0 {
		maxAge = guard.MaxReclaimTTL
	}

	now := time.Now
	if s.Now != nil {
		now = s.Now
	}

	var list corev1.SecretList
	if err := s.Reader.List(ctx, &list, client.MatchingFieldsSelector{
		Selector: fields.OneTermEqualSelector("type", ichorv1alpha1.ForeignTalosconfigSecretType),
	}); err != nil {
		return 0, err
	}

	deleted := 0

	for i := range list.Items {
		sec := &list.Items[i]
		if sec.Type != ichorv1alpha1.ForeignTalosconfigSecretType || now().Sub(sec.CreationTimestamp.Time) <= maxAge {
			continue
		}

		if err := s.Client.Delete(ctx, sec, client.Preconditions{UID: &sec.UID}); client.IgnoreNotFound(err) != nil {
			return deleted, err
		}

		deleted++

		ctrl.LoggerFrom(ctx).Info("deleted a foreign talosconfig older than the maximum TTL", "namespace", sec.Namespace, "secret", sec.Name, "maxAge", maxAge.String())
	}

	return deleted, nil
}

var pemBlock = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]+-----.*?-----END [A-Z0-9 ]+-----`)

// redact removes the talosconfig's material from a message: every PEM block,
// and every base64 field of its contexts and their decoded form. The shared
// code never quotes the talosconfig; this is a second line.
func redact(msg string, talosconfig []byte) string {
	msg = pemBlock.ReplaceAllString(msg, "[redacted]")

	cfg, err := clientconfig.FromBytes(talosconfig)
	if err != nil {
		return msg
	}

	for _, c := range cfg.Contexts {
		if c == nil {
			continue
		}

		for _, v := range []string{c.CA, c.Crt, c.Key} {
			if len(v) < 16 {
				continue
			}

			msg = strings.ReplaceAll(msg, v, "[redacted]")

			if dec, err := base64.StdEncoding.DecodeString(v); err == nil && len(dec) >= 16 {
				msg = strings.ReplaceAll(msg, string(dec), "[redacted]")
			}
		}
	}

	return msg
}
