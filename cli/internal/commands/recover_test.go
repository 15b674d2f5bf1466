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

// `ichor restore` refuses bad flags before it reads the store or reaches
// anything: the mode, the store's URL and credentials, the identity file
// (naming the line, never its content).
func TestRestoreRefusesBadInputWithoutWriting(t *testing.T) {
	home := t.TempDir()
	t.Setenv(secretstore.HomeEnv, home)
	t.Setenv(secretstore.PassphraseEnv, "not-used")
	t.Setenv(envS3AccessKey, "")
	t.Setenv(envS3SecretKey, "")
	t.Setenv(envAWSAccess, "")
	t.Setenv(envAWSSecret, "")

	bad := filepath.Join(home, "bad.txt")
	if err := os.WriteFile(bad, []byte("AGE-SECRET-KEY-1SECRETLOOKINGBUTWRONG\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	withCreds := func() {
		t.Setenv(envS3AccessKey, "id")
		t.Setenv(envS3SecretKey, "secret")
	}

	for _, tc := range []struct {
		args  []string
		creds bool
		want  string
	}{
		{[]string{"restore"}, false, "needs --recover-cluster CLUSTER"},
		{[]string{"restore", "--recover-cluster", "a", "--confirm", "a"}, false, "not both"},
		{[]string{"restore", "--recover-cluster", "prod", "--identity", bad}, true, "--from-store is missing"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "s3.example.com/b", "--identity", bad}, true, "is not a URL"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "https://s3.example.com", "--identity", bad}, true, "names no bucket"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "https://s3.example.com/b", "--identity", bad}, false, "credentials are missing"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "https://s3.example.com/b"}, true, "--identity is missing"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "https://s3.example.com/b", "--identity", bad}, true, "line 1 is not an age identity"},
		{[]string{"restore", "--recover-cluster", "prod", "--from-store", "https://s3.example.com/b", "--identity", bad, "--install", "helm"}, true, `--install "helm"`},
	} {
		t.Setenv(envS3AccessKey, "")
		t.Setenv(envS3SecretKey, "")

		if tc.creds {
			withCreds()
		}

		var out, errOut bytes.Buffer

		app := New()
		app.Writer, app.ErrWriter = &out, &errOut

		err := app.Run(context.Background(), append([]string{"ichor"}, tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRETLOOKING") {
			t.Errorf("ichor %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}

		if entries, _ := os.ReadDir(filepath.Join(home, "clusters")); len(entries) != 0 {
			t.Fatalf("ichor %s wrote %d store directories", strings.Join(tc.args, " "), len(entries))
		}
	}
}
