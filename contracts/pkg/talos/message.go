package talos

import (
	"errors"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxMessage is the longest node error a status or Event carries.
const maxMessage = 1024

var (
	// pemBlock is a PEM block, or the start of one cut off.
	pemBlock = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]+-----[\s\S]*?(-----END [A-Z0-9 ]+-----|$)`)
	// longToken is a run of base64 or hex long enough to be key material, a
	// token or a certificate; field paths, names and versions are shorter or
	// carry other characters.
	longToken = regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`)
)

// Message is a node's error as a condition, an operation's failureReason or
// an Event may hold it: the gRPC code and message without the transport's
// noise, on one line, at most 1,024 bytes, and with anything shaped like key
// material (a PEM block, a long base64 or hex run) replaced by [redacted].
// Talos's messages name fields and paths; a configuration it quotes back
// could hold a secret, which must not reach the API (house rule 6).
func Message(err error) string {
	msg := err.Error()

	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) && se.GRPCStatus().Code() != codes.OK {
		msg = se.GRPCStatus().Code().String() + ": " + se.GRPCStatus().Message()
	}

	msg = pemBlock.ReplaceAllString(msg, "[redacted]")
	msg = longToken.ReplaceAllString(msg, "[redacted]")
	msg = strings.Join(strings.Fields(msg), " ")

	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}

	return msg
}
