package commands

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDownloadRefusesBadParameters: the download commands refuse a bad
// capture or a missing argument before they connect to anything, and write no file.
func TestDownloadRefusesBadParameters(t *testing.T) {
	file := filepath.Join(t.TempDir(), "out")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "capture", "cp-1", "--interface", "a/b", "-f", file}, "not a network interface name"},
		{[]string{"node", "capture", "cp-1", "--interface", "eth0", "--duration", "1h", "-f", file}, "outside 1s to 5m0s"},
		{[]string{"node", "capture", "cp-1", "--interface", "eth0", "--snap-len", "8", "-f", file}, "snap length 8 is outside"},
		{[]string{"node", "support-bundle", "-f", file}, "takes MACHINE"},
		{[]string{"etcd", "snapshot", "a", "b", "-f", file}, "takes MACHINE"},
	} {
		app := New()
		var out, errOut bytes.Buffer
		app.Writer, app.ErrWriter = &out, &errOut

		err := app.Run(t.Context(), append([]string{"ichor", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}

		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("%v wrote %s", tc.args, file)
		}
	}
}

// TestOpenDownloadFile: the file is private, and removed when the download fails.
func TestOpenDownloadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap")

	w, done, err := openDownloadFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := w.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}

	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the download file: %v, %v; want mode 0600", fi, err)
	}

	done(false)

	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed download left %s", path)
	}
}
