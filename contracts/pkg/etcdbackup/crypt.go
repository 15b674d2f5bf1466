package etcdbackup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
)

// DefaultRecipientsKey is the key of the encryption Secret read when the
// backup's encryptionKeyRef names none.
const DefaultRecipientsKey = "recipients"

// ParseRecipients reads the age recipients a backup encrypts to: one per
// line, blank lines and # comments skipped. A line may be a recipient
// (age1…) or an identity (AGE-SECRET-KEY-1…), whose recipient is used; an
// identity in the cluster decrypts every snapshot, so the recipient alone is
// what belongs there. Errors name the line, never its content.
func ParseRecipients(data []byte) ([]age.Recipient, error) {
	var out []age.Recipient

	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0

	for sc.Scan() {
		line++

		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}

		if strings.HasPrefix(l, "AGE-SECRET-KEY-1") {
			id, err := age.ParseX25519Identity(l)
			if err != nil {
				return nil, fmt.Errorf("line %d is an age identity that does not parse", line)
			}

			out = append(out, id.Recipient())

			continue
		}

		r, err := age.ParseX25519Recipient(l)
		if err != nil {
			return nil, fmt.Errorf("line %d is not an age recipient (age1…, as `age-keygen -y` prints)", line)
		}

		out = append(out, r)
	}

	if err := sc.Err(); err != nil {
		return nil, errors.New("the recipients do not read as lines of text")
	}

	if len(out) == 0 {
		return nil, errors.New("it holds no age recipient (age1…, one per line)")
	}

	return out, nil
}

// ParseIdentities reads age identities (AGE-SECRET-KEY-1…, one per line),
// for the restore paths. Errors name the line, never its content.
func ParseIdentities(data []byte) ([]age.Identity, error) {
	var out []age.Identity

	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0

	for sc.Scan() {
		line++

		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}

		id, err := age.ParseX25519Identity(l)
		if err != nil {
			return nil, fmt.Errorf("line %d is not an age identity (AGE-SECRET-KEY-1…)", line)
		}

		out = append(out, id)
	}

	if len(out) == 0 {
		return nil, errors.New("no age identity found (AGE-SECRET-KEY-1…, one per line)")
	}

	return out, nil
}

// Encrypt copies src into dst encrypted to the recipients and returns how
// many plain bytes it read.
func Encrypt(dst io.Writer, src io.Reader, recipients []age.Recipient) (int64, error) {
	w, err := age.Encrypt(dst, recipients...)
	if err != nil {
		return 0, fmt.Errorf("start the age encryption: %w", err)
	}

	n, err := io.Copy(w, src)
	if err != nil {
		return n, err
	}

	if err := w.Close(); err != nil {
		return n, fmt.Errorf("finish the age encryption: %w", err)
	}

	return n, nil
}

// Decrypt returns the plain snapshot of an encrypted one. age authenticates
// every chunk: a reader error means the object was changed or cut.
func Decrypt(src io.Reader, identities []age.Identity) (io.Reader, error) {
	r, err := age.Decrypt(src, identities...)
	if err != nil {
		return nil, fmt.Errorf("decrypt the snapshot (is the identity one of the backup's recipients?): %w", err)
	}

	return r, nil
}
