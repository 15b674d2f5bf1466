package nodes

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// serviceKernel is the service name of the kernel log (dmesg).
const serviceKernel = "kernel"

// readLines calls fn for each line of a Talos data stream, without its newline.
func readLines(stream talosclient.MachineStream, fn func(string) error) error {
	rd, err := talosclient.ReadStream(stream)
	if err != nil {
		return err
	}
	defer rd.Close() //nolint:errcheck

	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)

	for sc.Scan() {
		if err := fn(sc.Text()); err != nil {
			return err
		}
	}

	return sc.Err()
}

// resumeToken names a line: the time the line says it was logged (when it
// says) and a hash of the line. A reconnecting client gives the token of the
// last line it saw and gets the lines after it: Talos's Logs and Dmesg have no
// offsets, so the lines are read again from the node and skipped up to it.
type resumeToken struct {
	at   time.Time
	hash uint64
}

func tokenFor(line string, at time.Time) resumeToken {
	h := fnv.New64a()
	_, _ = h.Write([]byte(line))

	return resumeToken{at: at, hash: h.Sum64()}
}

func (t resumeToken) String() string {
	at := "-"
	if !t.at.IsZero() {
		at = strconv.FormatInt(t.at.UnixNano(), 36)
	}

	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "v1.%s.%x", at, t.hash))
}

func parseToken(s string) (*resumeToken, error) {
	if s == "" {
		return nil, nil //nolint:nilnil // no token
	}

	bad := status.Error(codes.InvalidArgument, "resume_token is not one this server issued: start again without it")

	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}

	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, bad
	}

	t := &resumeToken{}

	if parts[1] != "-" {
		ns, err := strconv.ParseInt(parts[1], 36, 64)
		if err != nil {
			return nil, bad
		}

		t.at = time.Unix(0, ns).UTC()
	}

	if t.hash, err = strconv.ParseUint(parts[2], 16, 64); err != nil {
		return nil, bad
	}

	return t, nil
}

// lineTime reads the time a log line starts with: RFC 3339 (Talos's own
// services), Go's log format, or the "[time]" of Talos's Dmesg format
// "facility: priority: [time]: message".
func lineTime(line string) time.Time {
	if i := strings.IndexByte(line, ' '); i > 0 {
		if t, err := time.Parse(time.RFC3339Nano, line[:i]); err == nil {
			return t.UTC()
		}
	}

	if len(line) >= 26 {
		if t, err := time.Parse("2006/01/02 15:04:05.000000", line[:26]); err == nil {
			return t.UTC()
		}
	}

	if len(line) >= 19 {
		if t, err := time.Parse("2006/01/02 15:04:05", line[:19]); err == nil {
			return t.UTC()
		}
	}

	if i := strings.Index(line, ": ["); i >= 0 {
		if j := strings.Index(line[i:], "]: "); j > 3 {
			if t, err := time.Parse(time.RFC3339Nano, line[i+3:i+j]); err == nil {
				return t.UTC()
			}
		}
	}

	return time.Time{}
}

// skipper drops the lines up to the one a resume token names.
type skipper struct {
	tok     *resumeToken
	done    bool
	skipped int
	// limit bounds the skipping of lines without a time: past it, the token's
	// line is not in the log any more and every line is new.
	limit int
}

func (s *skipper) skip(line string, at time.Time) bool {
	if s.tok == nil || s.done {
		return false
	}

	if !s.tok.at.IsZero() && !at.IsZero() {
		switch {
		case at.Before(s.tok.at):
			return true
		case at.Equal(s.tok.at):
			if tokenFor(line, at).hash == s.tok.hash {
				s.done = true
			}

			return true
		default:
			s.done = true

			return false
		}
	}

	s.skipped++

	if tokenFor(line, at).hash == s.tok.hash {
		s.done = true

		return true
	}

	if s.skipped >= s.limit {
		s.done = true

		return false
	}

	return true
}

// StreamNodeLogs implements NodeService: the last tail_lines lines of a
// service's log (or of the kernel log), then, with follow, the new ones;
// with resume_token, only the lines after the one it names.
func (s *Service) StreamNodeLogs(req *ichorv1.StreamNodeLogsRequest, stream ichorv1.NodeService_StreamNodeLogsServer) error {
	if req.GetService() == "" {
		return status.Error(codes.InvalidArgument, "service is required: a Talos service id such as kubelet or etcd, or kernel for the kernel log")
	}

	n, err := lines(req.GetTailLines(), defaultLogLines)
	if err != nil {
		return err
	}

	tok, err := parseToken(req.GetResumeToken())
	if err != nil {
		return err
	}

	done, err := s.openLogStream(stream.Context())
	if err != nil {
		return err
	}
	defer done()

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	stopping := make(chan struct{})

	go func() {
		select {
		case <-s.Stopping:
			close(stopping)
			cancel()
		case <-ctx.Done():
		}
	}()

	c, m, err := s.connect(ctx, req.GetName())
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck

	send := func(line string) (resumeToken, error) {
		at := lineTime(line)
		t := tokenFor(line, at)
		out := &ichorv1.StreamNodeLogsResponse{Line: line, ResumeToken: t.String()}

		if !at.IsZero() {
			out.Time = timestamppb.New(at)
		}

		return t, stream.Send(out)
	}

	what := fmt.Sprintf("reading the log of %s", req.GetService())
	err = s.streamLog(ctx, c, req, n, tok, send)

	select {
	case <-stopping:
		return status.Error(codes.Unavailable, "ichor-ui is shutting down; reconnect and resume with the last resume_token")
	default:
	}

	if err != nil && stream.Context().Err() == nil {
		return nodeError(ctx, m, err, what)
	}

	return nil
}

func (s *Service) streamLog(ctx context.Context, c *talosclient.Client, req *ichorv1.StreamNodeLogsRequest, n int, tok *resumeToken,
	send func(string) (resumeToken, error),
) error {
	emit := func(sk *skipper) func(string) error {
		return func(line string) error {
			if sk.skip(line, lineTime(line)) {
				return nil
			}

			t, err := send(line)
			if err == nil {
				// a later phase skips up to the last line sent
				tok = &t
			}

			return err
		}
	}

	if req.GetService() != serviceKernel {
		tail := int32(n) //nolint:gosec // at most maxLines
		if tok != nil {
			tail = maxLines
		}

		logs, err := c.Logs(ctx, "system", common.ContainerDriver_CONTAINERD, req.GetService(), req.GetFollow(), tail)
		if err != nil {
			return err
		}

		return readLines(logs, emit(&skipper{tok: tok, limit: maxLines}))
	}

	// The kernel log has no tail: without a token, read it once for the last
	// n lines; with follow, read it again from the start, skipping what was sent.
	if tok == nil {
		dm, err := c.Dmesg(ctx, false, false)
		if err != nil {
			return err
		}

		var last []string

		if err := readLines(dm, func(l string) error {
			last = append(last, l)
			if len(last) > 2*n {
				last = append(last[:0], last[len(last)-n:]...)
			}

			return nil
		}); err != nil {
			return err
		}

		if len(last) > n {
			last = last[len(last)-n:]
		}

		for _, l := range last {
			if err := emit(&skipper{})(l); err != nil {
				return err
			}
		}

		if !req.GetFollow() {
			return nil
		}
	}

	dm, err := c.Dmesg(ctx, req.GetFollow(), false)
	if err != nil {
		return err
	}

	return readLines(dm, emit(&skipper{tok: tok, limit: 1 << 30}))
}
