// Package output prints what the CLI shows: aligned tables and blocks for
// people, YAML or JSON for scripts (`-o yaml|json`).
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Formats of -o.
const (
	Table = "table"
	YAML  = "yaml"
	JSON  = "json"
)

// ParseFormat checks the value of -o.
func ParseFormat(s string) (string, error) {
	switch s {
	case "", Table:
		return Table, nil
	case YAML, JSON:
		return s, nil
	default:
		return "", fmt.Errorf("-o %q is not an output format: use table, yaml or json", s)
	}
}

// Object prints v as YAML or JSON.
func Object(w io.Writer, format string, v any) error {
	switch format {
	case JSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	default:
		return fmt.Errorf("output format %q cannot print an object", format)
	}
}

// Rows is a table: a header and rows of cells. Columns are separated by three
// spaces and padded to the widest cell, as kubectl does; an empty cell is
// printed as "-" unless the column is the last.
type Rows struct {
	Header []string
	Rows   [][]string
	widths []int
}

// Add appends a row.
func (t *Rows) Add(cells ...string) {
	t.Rows = append(t.Rows, cells)
}

// Widths computes and fixes the column widths from the header and the rows,
// so that rows printed later (a watch) line up with the first table.
func (t *Rows) Widths() []int {
	if t.widths != nil {
		return t.widths
	}
	w := make([]int, len(t.Header))
	measure := func(cells []string) {
		for i, c := range cells {
			if i < len(w) && utf8.RuneCountInString(cell(c)) > w[i] {
				w[i] = utf8.RuneCountInString(cell(c))
			}
		}
	}
	measure(t.Header)
	for _, r := range t.Rows {
		measure(r)
	}
	t.widths = w
	return w
}

func cell(c string) string {
	if c == "" {
		return "-"
	}
	return c
}

// Line renders one row with the fixed widths.
func (t *Rows) Line(cells []string) string {
	w := t.Widths()
	var b strings.Builder
	for i, c := range cells {
		c = cell(c)
		if i == len(cells)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		pad := 3
		if i < len(w) {
			pad += w[i] - utf8.RuneCountInString(c)
		}
		if pad < 1 {
			pad = 1
		}
		b.WriteString(strings.Repeat(" ", pad))
	}
	return strings.TrimRight(b.String(), " ")
}

// Write prints the header and the rows.
func (t *Rows) Write(w io.Writer) error {
	t.Widths()
	if _, err := fmt.Fprintln(w, t.Line(t.Header)); err != nil {
		return err
	}
	for _, r := range t.Rows {
		if _, err := fmt.Fprintln(w, t.Line(r)); err != nil {
			return err
		}
	}
	return nil
}

// Block is a list of "Label: value" lines with the values aligned.
type Block struct {
	lines [][2]string
}

// Add appends a line; an empty value prints as "-".
func (b *Block) Add(label, value string) {
	b.lines = append(b.lines, [2]string{label, value})
}

// Write prints the block.
func (b *Block) Write(w io.Writer) error {
	width := 0
	for _, l := range b.lines {
		if n := utf8.RuneCountInString(l[0]); n > width {
			width = n
		}
	}
	for _, l := range b.lines {
		pad := strings.Repeat(" ", width-utf8.RuneCountInString(l[0])+2)
		if _, err := fmt.Fprintf(w, "%s:%s%s\n", l[0], pad, cell(l[1])); err != nil {
			return err
		}
	}
	return nil
}

// Age is a duration as kubectl prints an object's age (5m, 3h12m, 4d).
func Age(since, now time.Time) string {
	if since.IsZero() {
		return ""
	}
	return duration.HumanDuration(now.Sub(since))
}

// Bytes is a size in binary units (for disks).
func Bytes(n int64) string {
	if n <= 0 {
		return ""
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
