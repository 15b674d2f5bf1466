package output

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRowsAligned(t *testing.T) {
	tb := &Rows{Header: []string{"NAME", "ROLE", "AGE"}}
	tb.Add("cp-1", "controlplane", "5m")
	tb.Add("worker-long-name", "", "3d")
	var b bytes.Buffer
	if err := tb.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME               ROLE           AGE\n" +
		"cp-1               controlplane   5m\n" +
		"worker-long-name   -              3d\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	// A row printed later (a watch) keeps the widths of the first table.
	if got := tb.Line([]string{"w", "worker", "1s"}); got != "w                  worker         1s" {
		t.Fatalf("later row %q", got)
	}
}

func TestBlock(t *testing.T) {
	bl := &Block{}
	bl.Add("Name", "cp-1")
	bl.Add("Install disk", "")
	var b bytes.Buffer
	if err := bl.Write(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != "Name:          cp-1\nInstall disk:  -\n" {
		t.Fatalf("block:\n%q", b.String())
	}
}

func TestFormatsAndUnits(t *testing.T) {
	for _, f := range []string{"", "table", "yaml", "json"} {
		if _, err := ParseFormat(f); err != nil {
			t.Fatalf("%q: %v", f, err)
		}
	}
	if _, err := ParseFormat("wide"); err == nil || !strings.Contains(err.Error(), "table, yaml or json") {
		t.Fatalf("an unknown format must name the known ones: %v", err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if got := Age(now.Add(-90*time.Minute), now); got != "90m" {
		t.Fatalf("age %q", got)
	}
	if got := Bytes(512110190592); got != "476.9 GiB" {
		t.Fatalf("bytes %q", got)
	}
	var b bytes.Buffer
	if err := Object(&b, YAML, map[string]int{"a": 1}); err != nil || b.String() != "a: 1\n" {
		t.Fatalf("yaml %q %v", b.String(), err)
	}
}
