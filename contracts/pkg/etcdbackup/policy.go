package etcdbackup

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// DefaultRetentionCount is how many snapshots are kept when
// spec.retention.count is empty.
const DefaultRetentionCount = 14

// ParseSchedule reads spec.schedule: five cron fields (minute hour
// day-of-month month day-of-week) in UTC, a descriptor such as @daily, or
// @every <duration>. A time zone prefix is refused: the schedule is UTC.
func ParseSchedule(s string) (cron.Schedule, error) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "TZ=") || strings.HasPrefix(t, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q names a time zone; the schedule is in UTC, write it without %q", s, strings.SplitN(t, " ", 2)[0])
	}

	sched, err := cron.ParseStandard(t)
	if err != nil {
		return nil, fmt.Errorf("schedule %q is not a cron expression (five fields: minute hour day-of-month month day-of-week, such as \"0 */6 * * *\", or @daily, or @every 6h): %w", s, err)
	}

	return sched, nil
}

// NextRun is when the next scheduled snapshot is due: the first time of the
// schedule after the last one started (or, before any, after since: the
// backup's creation). A missed run is due at once, once.
func NextRun(sched cron.Schedule, lastScheduled *time.Time, since time.Time) time.Time {
	from := since
	if lastScheduled != nil && lastScheduled.After(from) {
		from = *lastScheduled
	}

	return sched.Next(from.UTC())
}

// StaleAfter is when a backup becomes stale: when a second scheduled run has
// come since the last good snapshot (or since the backup was created) and
// none has succeeded, so one run failed or was missed and another is late.
func StaleAfter(sched cron.Schedule, lastSuccess *time.Time, since time.Time) time.Time {
	from := since
	if lastSuccess != nil && lastSuccess.After(from) {
		from = *lastSuccess
	}

	return sched.Next(sched.Next(from.UTC()))
}

// Expired picks the snapshots retention deletes from a list newest first:
// those past count, and those older than maxAge (zero: no age limit). The
// newest snapshot is never deleted, so a backup that keeps failing does not
// age its last good snapshot away.
func Expired(objs []Object, count int, maxAge time.Duration, now time.Time) []Object {
	if count <= 0 {
		count = DefaultRetentionCount
	}

	var out []Object

	for i, o := range objs {
		if i == 0 {
			continue
		}

		if i >= count || (maxAge > 0 && now.Sub(o.TakenAt) > maxAge) {
			out = append(out, o)
		}
	}

	return out
}

// ClusterNetworks are the pod and service ranges of a cluster and its DNS
// domain; empty fields mean Talos's defaults.
type ClusterNetworks struct {
	PodSubnets, ServiceSubnets []string
	DNSDomain                  string
}

// InCluster says why a store at endpoint lives inside the cluster ("" when it
// does not seem to): a Service name (<svc>.<ns>.svc[.<domain>]), or an
// address in the cluster's pod or service range. A restore into the live
// cluster writes its marker to the store after the API server is down, so
// such a store would deadlock it (architecture, "Backup, recovery,
// certificates").
func InCluster(endpoint string, n ClusterNetworks) string {
	host, _, err := ParseEndpoint(endpoint)
	if err != nil {
		return ""
	}

	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}

	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")

	domain := n.DNSDomain
	if domain == "" {
		domain = constants.DefaultDNSDomain
	}

	if addr, err := netip.ParseAddr(host); err == nil {
		pods, svcs := n.PodSubnets, n.ServiceSubnets
		if len(pods) == 0 {
			pods = []string{constants.DefaultIPv4PodCIDR}
		}

		if len(svcs) == 0 {
			svcs = []string{constants.DefaultIPv4ServiceCIDR}
		}

		for _, c := range [...]struct {
			what  string
			cidrs []string
		}{{"pod", pods}, {"service", svcs}} {
			for _, cidr := range c.cidrs {
				if p, err := netip.ParsePrefix(cidr); err == nil && p.Contains(addr) {
					return fmt.Sprintf("its address %s is in the cluster's %s range %s", host, c.what, cidr)
				}
			}
		}

		return ""
	}

	if strings.HasSuffix(host, ".svc") || strings.HasSuffix(host, ".svc."+domain) {
		return fmt.Sprintf("%s is the name of a Service of the cluster", host)
	}

	return ""
}

// ParseEndpoint checks an endpoint URL and returns its host and whether it
// uses TLS. The S3 API is served at the root of its host: a path is refused.
func ParseEndpoint(endpoint string) (host string, secure bool, err error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("%q is not a URL such as https://s3.example.com", endpoint)
	}

	switch u.Scheme {
	case "https":
		secure = true
	case "http":
	default:
		return "", false, fmt.Errorf("%q uses scheme %q; the S3 endpoint is http:// or https://", endpoint, u.Scheme)
	}

	if strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%q has a path, query or user; the S3 endpoint is the bare URL of the service (put a key prefix in spec.s3.prefix)", endpoint)
	}

	return u.Host, secure, nil
}
