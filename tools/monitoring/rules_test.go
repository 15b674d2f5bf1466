package monitoring

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../.."

// TestAlertRules evaluates the PrometheusRule ichor with Prometheus's own
// rules engine over testdata/alerts_test.yaml (promtool's format): every
// alert fires in one test and stays quiet in another.
func TestAlertRules(t *testing.T) {
	rule, err := LoadPrometheusRule(filepath.Join(repoRoot, Dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := WriteRuleFile(t.TempDir(), rule)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := LoadUnitTests("testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}

	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tg := range tests.Tests {
		t.Run(tg.Name, func(t *testing.T) {
			for _, err := range Run(file, time.Duration(tests.EvaluationInterval), tg) {
				t.Error(err)
			}
		})
		for _, c := range tg.Alerts {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}

	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s needs a test in which it fires (%v) and one in which it does not (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// The runner is not vacuous: a test that expects the wrong thing fails.
func TestAlertRulesRunnerFailsAWrongExpectation(t *testing.T) {
	rule, err := LoadPrometheusRule(filepath.Join(repoRoot, Dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := WriteRuleFile(t.TempDir(), rule)
	if err != nil {
		t.Fatal(err)
	}
	tg := TestGroup{
		Name: "wrong", Interval: 0,
		InputSeries: []Series{{Series: `ichor_etcd_backup_stale{namespace="prod", backup="b", cluster="prod"}`, Values: "0x10"}},
		Alerts:      []AlertTestCase{{EvalTime: modelMinutes(10), Alertname: "IchorEtcdBackupStale", ExpAlerts: []ExpAlert{{ExpLabels: map[string]string{"backup": "b"}}}}},
	}
	errs := Run(file, time.Minute, tg)
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), "0 alerts fire") {
		t.Fatalf("a wrong expectation passed: %v", errs)
	}
	tg.Alerts[0].Alertname = "NoSuchAlert"
	if errs := Run(file, time.Minute, tg); len(errs) == 0 || !strings.Contains(errs[0].Error(), "no alerting rule NoSuchAlert") {
		t.Fatalf("an unknown alert passed: %v", errs)
	}
}
