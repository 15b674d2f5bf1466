// Package monitoring checks Ichor's monitoring objects (kustomize/optional/
// monitoring): the alert rules are evaluated by Prometheus's own rules engine
// against unit tests in promtool's format (TestAlertRules), every metric a
// rule or a dashboard names is one the README documents
// (TestDashboardsQueryExportedMetrics), and the objects decode strictly into
// prometheus-operator's own API types.
//
// It is its own module, outside go.work (like tools/chart), so that
// Prometheus's large dependency tree never reaches the deliverables.
package monitoring

// The ServiceMonitor and PrometheusRule CRDs, from prometheus-operator's module.
//go:generate bash crds/generate.sh

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"sigs.k8s.io/yaml"
)

// Dir is the monitoring objects' directory, relative to the repository root.
const Dir = "kustomize/optional/monitoring"

// LoadPrometheusRule decodes the PrometheusRule manifest strictly into
// prometheus-operator's type: a field the operator does not know fails.
func LoadPrometheusRule(path string) (*monitoringv1.PrometheusRule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}

	var r monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	if r.Kind != monitoringv1.PrometheusRuleKind {
		return nil, fmt.Errorf("%s holds a %s, not a PrometheusRule", path, r.Kind)
	}

	return &r, nil
}

// WriteRuleFile writes the PrometheusRule's groups as a Prometheus rule file
// (the operator hands Prometheus the same document) and returns its path.
func WriteRuleFile(dir string, r *monitoringv1.PrometheusRule) (string, error) {
	data, err := yaml.Marshal(map[string]any{"groups": r.Spec.Groups})
	if err != nil {
		return "", err
	}

	path := filepath.Join(dir, r.Name+".rules.yaml")

	return path, os.WriteFile(path, data, 0o600)
}

// UnitTests is a rule unit test file in promtool's format
// (prometheus cmd/promtool/unittest.go: unitTestFile, testGroup,
// alertTestCase), without rule_files: the rules under test are the
// PrometheusRule's.
type UnitTests struct {
	EvaluationInterval model.Duration `json:"evaluation_interval"`
	Tests              []TestGroup    `json:"tests"`
}

// TestGroup is one test: input series and the alerts expected at times.
type TestGroup struct {
	Name        string          `json:"name"`
	Interval    model.Duration  `json:"interval"`
	InputSeries []Series        `json:"input_series"`
	Alerts      []AlertTestCase `json:"alert_rule_test"`
}

// Series is one input series in promtool's expanding notation ("1+0x60").
type Series struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

// AlertTestCase is what alertname fires at eval_time; an empty ExpAlerts
// means it must not fire.
type AlertTestCase struct {
	EvalTime  model.Duration `json:"eval_time"`
	Alertname string         `json:"alertname"`
	ExpAlerts []ExpAlert     `json:"exp_alerts"`
}

// ExpAlert is one expected firing alert: its labels exactly (alertname and
// the rule's own labels added), and the annotations listed (promtool wants
// every annotation; here those given must match, the others are not
// compared).
type ExpAlert struct {
	ExpLabels      map[string]string `json:"exp_labels"`
	ExpAnnotations map[string]string `json:"exp_annotations"`
}

// LoadUnitTests reads a unit test file; unknown fields fail.
func LoadUnitTests(path string) (*UnitTests, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}

	var u UnitTests
	if err := yaml.UnmarshalStrict(data, &u); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	if u.EvaluationInterval == 0 {
		u.EvaluationInterval = model.Duration(time.Minute)
	}

	return &u, nil
}

// Parser is the PromQL parser of the rules and the tests: Prometheus's
// default set of functions, no experimental syntax.
func Parser() parser.Parser { return parser.NewParser(parser.Options{}) }

// Run evaluates the rule file over one test group the way promtool does
// (load the input series lazily, evaluate every group at every evaluation
// interval from 0 to the last eval_time, compare the firing alerts at each
// eval_time) and returns what differed.
func Run(ruleFile string, evalInterval time.Duration, tg TestGroup) []error {
	interval := time.Duration(tg.Interval)
	if interval == 0 {
		interval = time.Minute
	}

	var load strings.Builder

	fmt.Fprintf(&load, "load %s\n", model.Duration(interval))

	for _, s := range tg.InputSeries {
		fmt.Fprintf(&load, "  %s %s\n", s.Series, s.Values)
	}

	p := Parser()

	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: p,
	})
	if err != nil {
		return []error{fmt.Errorf("input series: %w", err)}
	}

	defer suite.Close() //nolint:errcheck // an in-memory storage

	suite.SubqueryInterval = evalInterval

	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       p,
	})

	groupsMap, errs := m.LoadGroups(evalInterval, labels.EmptyLabels(), "", nil, false, ruleFile)
	if errs != nil {
		return errs
	}

	groups := make([]*rules.Group, 0, len(groupsMap))
	for _, g := range groupsMap {
		groups = append(groups, g)

		for _, r := range g.Rules() {
			if a, ok := r.(*rules.AlertingRule); ok {
				// As promtool does: a rule evaluated from the start needs no
				// restored state (the ALERTS_FOR_STATE series).
				a.SetRestored(true)
			}
		}
	}

	sort.Slice(groups, func(i, j int) bool { return groups[i].Name() < groups[j].Name() })

	cases := slices.Clone(tg.Alerts)
	sort.SliceStable(cases, func(i, j int) bool { return cases[i].EvalTime < cases[j].EvalTime })

	if len(cases) == 0 {
		return []error{fmt.Errorf("test %q checks no alert", tg.Name)}
	}

	start := time.Unix(0, 0).UTC()
	end := start.Add(time.Duration(cases[len(cases)-1].EvalTime))
	next := 0

	var out []error

	for ts := start; !ts.After(end); ts = ts.Add(evalInterval) {
		var evalErrs []error

		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErrs = append(evalErrs, err)

				return
			}

			for _, g := range groups {
				g.Eval(suite.Context(), ts)

				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErrs = append(evalErrs, fmt.Errorf("rule %s at %s: %w", r.Name(), ts.Sub(start), r.LastError()))
					}
				}
			}
		})

		if len(evalErrs) > 0 {
			return append(out, evalErrs...)
		}

		// The cases whose eval_time falls in [ts, ts+interval) are compared
		// with this evaluation.
		for next < len(cases) && time.Duration(cases[next].EvalTime) < ts.Add(evalInterval).Sub(start) {
			c := cases[next]
			next++

			if err := compare(groups, c); err != nil {
				out = append(out, fmt.Errorf("at %s: %w", c.EvalTime, err))
			}
		}
	}

	return out
}

// compare checks the firing alerts named c.Alertname against c's.
func compare(groups []*rules.Group, c AlertTestCase) error {
	var (
		got   []rules.Alert
		found bool
	)

	for _, g := range groups {
		for _, r := range g.Rules() {
			a, ok := r.(*rules.AlertingRule)
			if !ok || a.Name() != c.Alertname {
				continue
			}

			found = true

			for _, al := range a.ActiveAlerts() {
				if al.State == rules.StateFiring {
					got = append(got, *al)
				}
			}
		}
	}

	if !found {
		return fmt.Errorf("no alerting rule %s", c.Alertname)
	}

	var want []ExpAlert

	for _, e := range c.ExpAlerts {
		l := map[string]string{labels.AlertName: c.Alertname}
		for k, v := range e.ExpLabels {
			l[k] = v
		}

		want = append(want, ExpAlert{ExpLabels: l, ExpAnnotations: e.ExpAnnotations})
	}

	if len(got) != len(want) {
		return fmt.Errorf("%s: %d alerts fire (%s), want %d (%s)", c.Alertname, len(got), describe(got), len(want), describeWant(want))
	}

	sort.Slice(got, func(i, j int) bool { return labels.Compare(got[i].Labels, got[j].Labels) < 0 })
	sort.Slice(want, func(i, j int) bool {
		return labels.Compare(labels.FromMap(want[i].ExpLabels), labels.FromMap(want[j].ExpLabels)) < 0
	})

	for i := range got {
		if !labels.Equal(got[i].Labels, labels.FromMap(want[i].ExpLabels)) {
			return fmt.Errorf("%s fires with labels %s, want %s", c.Alertname, got[i].Labels, labels.FromMap(want[i].ExpLabels))
		}

		for k, v := range want[i].ExpAnnotations {
			if a := got[i].Annotations.Get(k); a != v {
				return fmt.Errorf("%s %s: annotation %s is %q, want %q", c.Alertname, got[i].Labels, k, a, v)
			}
		}
	}

	return nil
}

func describe(as []rules.Alert) string {
	var b bytes.Buffer

	for i, a := range as {
		if i > 0 {
			b.WriteString(", ")
		}

		b.WriteString(a.Labels.String())
	}

	return b.String()
}

func describeWant(as []ExpAlert) string {
	var b bytes.Buffer

	for i, a := range as {
		if i > 0 {
			b.WriteString(", ")
		}

		b.WriteString(labels.FromMap(a.ExpLabels).String())
	}

	return b.String()
}
