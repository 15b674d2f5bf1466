package monitoring

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// Documented is one row of the README's metrics table.
type Documented struct {
	Name, From, Type string
}

// DocumentedMetrics reads the README's metrics table: the rows whose first
// cell is a metric name in backquotes.
func DocumentedMetrics(readme string) (map[string]Documented, error) {
	f, err := os.Open(readme)
	if err != nil {
		return nil, err
	}
	defer f.Close() //nolint:errcheck // read-only

	out := map[string]Documented{}
	sc := bufio.NewScanner(f)

	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`ichor_") {
			continue
		}

		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		out[name] = Documented{Name: name, From: strings.TrimSpace(cells[2]), Type: strings.TrimSpace(cells[3])}
	}

	if len(out) == 0 {
		return nil, fmt.Errorf("%s has no metrics table", readme)
	}

	return out, sc.Err()
}

// grafanaVariables are the dashboard variables that stand where PromQL
// wants a duration; label-value variables ("$cluster") sit inside strings
// and parse as they are.
var grafanaVariables = regexp.MustCompile(`\$__(rate_interval|interval|range)|\$\{__(rate_interval|interval|range)\}`)

// MetricNames parses a PromQL expression (a dashboard's, with its Grafana
// variables, or a rule's) and returns the metric names its selectors name.
func MetricNames(expr string) ([]string, error) {
	e, err := Parser().ParseExpr(grafanaVariables.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}

	var names []string

	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" {
					name = m.Value
				}
			}

			names = append(names, name)
		}

		return nil
	})

	return names, nil
}

// labelValues finds label_values(metric, label) and
// label_values(metric{...}, label) in a Grafana variable query.
var labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// VariableMetrics returns the metrics a Grafana variable query names.
func VariableMetrics(query string) []string {
	found := labelValues.FindAllStringSubmatch(query, -1)
	out := make([]string, 0, len(found))
	for _, m := range found {
		out = append(out, m[1])
	}

	return out
}

// Known reports whether name is a documented metric or one of the series a
// documented histogram exports (_bucket, _sum, _count).
func Known(doc map[string]Documented, name string) bool {
	if _, ok := doc[name]; ok {
		return true
	}

	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if d, ok := doc[strings.TrimSuffix(name, suffix)]; ok && strings.HasSuffix(name, suffix) && d.Type == "histogram" {
			return true
		}
	}

	return false
}
