package monitoring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// prometheusOwn are series Prometheus itself writes for every target: a
// rule may name them though no Ichor component exports them.
var prometheusOwn = map[string]bool{"up": true}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardsQueryExportedMetrics: every metric a dashboard panel, a
// dashboard variable or an alert rule names is in the README's metrics
// table (whose rows TestMetricsExported finds in a running controller's and
// ichor-ui's /metrics), and every query parses as PromQL.
func TestDashboardsQueryExportedMetrics(t *testing.T) {
	doc, err := DocumentedMetrics(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(where, expr string) {
		t.Helper()
		names, err := MetricNames(expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			return
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			if !Known(doc, n) && !prometheusOwn[n] {
				t.Errorf("%s names %s, which the README's metrics table does not list", where, n)
			}
		}
	}

	files, err := filepath.Glob(filepath.Join(repoRoot, Dir, "dashboards", "*.json"))
	if err != nil || len(files) != 3 {
		t.Fatalf("want the three dashboards (overview, operations, backups), found %v (%v)", files, err)
	}
	uids := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" || uids[d.UID] || len(d.Panels) == 0 {
			t.Errorf("%s: a dashboard needs a unique uid, a title and panels (uid %q, title %q, %d panels)", f, d.UID, d.Title, len(d.Panels))
		}
		uids[d.UID] = true
		for _, v := range d.Templating.List {
			q, _ := v.Query.(map[string]any)
			if s, ok := q["query"].(string); ok && v.Type == "query" {
				ms := VariableMetrics(s)
				if len(ms) == 0 {
					t.Errorf("%s variable %s: %q names no metric", f, v.Name, s)
				}
				for _, m := range ms {
					if !Known(doc, m) {
						t.Errorf("%s variable %s names %s, which the README's metrics table does not list", f, v.Name, m)
					}
				}
			}
		}
		for _, p := range d.Panels {
			where := filepath.Base(f) + " panel " + p.Title
			if len(p.Targets) == 0 {
				t.Errorf("%s has no query", where)
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("%s uses data source %q, want the dashboard's ${datasource} variable", where, p.Datasource.UID)
			}
			for _, tg := range p.Targets {
				check(where, tg.Expr)
			}
		}
	}

	rule, err := LoadPrometheusRule(filepath.Join(repoRoot, Dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			check("rule "+r.Alert+r.Record, r.Expr.String())
		}
	}
}

// The check is not vacuous: an undocumented name and a broken query fail.
func TestMetricNamesCheckRefusesUnknownMetrics(t *testing.T) {
	doc := map[string]Documented{"ichor_x_seconds": {Name: "ichor_x_seconds", Type: "histogram"}, "ichor_y": {Name: "ichor_y", Type: "gauge"}}
	names, err := MetricNames(`histogram_quantile(0.9, sum by (le) (rate(ichor_x_seconds_bucket{cluster=~"$cluster"}[$__rate_interval]))) / ichor_z`)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || !Known(doc, names[0]) || Known(doc, names[1]) {
		t.Errorf("names %v: want ichor_x_seconds_bucket known and ichor_z unknown", names)
	}
	if Known(doc, "ichor_y_bucket") {
		t.Error("a gauge has no _bucket series")
	}
	if _, err := MetricNames(`sum(ichor_y`); err == nil {
		t.Error("a broken query parsed")
	}
}

// The ServiceMonitors decode strictly into prometheus-operator's type.
func TestServiceMonitorsDecode(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, Dir, "servicemonitors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var sm monitoringv1.ServiceMonitor
		if err := yaml.UnmarshalStrict([]byte(doc), &sm); err != nil {
			t.Fatalf("a ServiceMonitor does not decode: %v", err)
		}
		if sm.Kind != monitoringv1.ServiceMonitorsKind || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Scheme == nil {
			t.Errorf("%s: want one https endpoint: %+v", sm.Name, sm.Spec.Endpoints)
		}
		if sm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "metrics" {
			t.Errorf("%s selects %v, want the metrics Service only", sm.Name, sm.Spec.Selector.MatchLabels)
		}
		seen[sm.Name] = true
	}
	if !seen["ichor-controller"] || !seen["ichor-ui"] {
		t.Errorf("want ServiceMonitors for ichor-controller and ichor-ui, got %v", seen)
	}
}
