package commands

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
)

// Bad flags are refused before anything is written: no secrets store, no
// bundle, no connection.
func TestInitRefusesBadInputWithoutWriting(t *testing.T) {
	home := t.TempDir()
	t.Setenv(secretstore.HomeEnv, home)
	t.Setenv(secretstore.PassphraseEnv, "not-used")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "--preset", "huge", "--node", "127.0.0.1"}, `--preset "huge"`},
		{[]string{"init", "--preset", "standard"}, "--node is missing"},
		{[]string{"init", "--preset", "standard", "--node", "127.0.0.1", "--install-disk", "size=1"}, "not a disk attribute"},
		{[]string{"init", "--preset", "standard", "--node", "127.0.0.1", "--cluster", "Bad_Name"}, "is not valid"},
		{[]string{"init", "--preset", "single", "--node", "127.0.0.1", "--ui-url", "ichor.example.com"}, "--ui-url"},
	} {
		var out, errOut bytes.Buffer

		app := New()
		app.Writer, app.ErrWriter = &out, &errOut

		err := app.Run(context.Background(), append([]string{"ichor"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ichor %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}

		if entries, _ := os.ReadDir(filepath.Join(home, "clusters")); len(entries) != 0 {
			t.Fatalf("ichor %s wrote %d store directories", strings.Join(tc.args, " "), len(entries))
		}
	}
}
