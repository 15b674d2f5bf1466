package talosemu_test

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

// BenchmarkStart1000 starts 1,000 machines in one process and waits until every one is in
// maintenance; a sample is then read through machinery's client. It reports the start time,
// the resident set after start and the process's peak resident set.
//
//	go test ./talosemu/ -run '^$' -bench Start1000 -benchtime 1x
func BenchmarkStart1000(b *testing.B) {
	const n = 1000

	spec, err := talosemu.GenerateSpec(n, 0, "127.78.0.0/22")
	if err != nil {
		b.Fatal(err)
	}

	spec.Durations = talosemu.Durations{Boot: talosemu.Duration(10 * time.Millisecond)}

	var last time.Duration

	for b.Loop() {
		dir := b.TempDir()
		start := time.Now()

		w, err := talosemu.Start(context.Background(), spec, dir, talosemu.Options{NoControlAPI: true})
		if err != nil {
			b.Fatal(err)
		}

		for _, m := range w.Machines() {
			for m.Stage() != runtime.MachineStageMaintenance {
				if time.Since(start) > 5*time.Minute {
					b.Fatalf("%s did not reach maintenance", m.Name())
				}

				time.Sleep(time.Millisecond)
			}
		}

		last = time.Since(start)

		b.StopTimer()

		for i := 0; i < n; i += n / 10 {
			m := w.Machines()[i]
			if _, err := maintenanceClient(b, m.IP()).Version(b.Context()); err != nil {
				b.Fatalf("%s: %v", m.Name(), err)
			}
		}

		b.ReportMetric(float64(procStatusKiB(b, "VmRSS"))/1024, "RSS-MiB")

		w.Close()
		b.StartTimer()
	}

	b.ReportMetric(last.Seconds(), "s/start")
	b.ReportMetric(float64(procStatusKiB(b, "VmHWM"))/1024, "peakRSS-MiB")
}

func procStatusKiB(b *testing.B, field string) int {
	b.Helper()

	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close() //nolint:errcheck

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				b.Fatal(err)
			}

			return kib
		}
	}

	b.Fatalf("%s not in /proc/self/status", field)

	return 0
}
