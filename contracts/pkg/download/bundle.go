package download

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.yaml.in/yaml/v4"
)

// Limits of a support bundle.
const (
	// BundleLogLines is how many of the last lines of each log the bundle keeps.
	BundleLogLines = 10000
	// maxEntry bounds one file of the bundle: a larger read is cut, and the cut said in errors.txt.
	maxEntry = 32 << 20
	// entryTimeout bounds one read of the node.
	entryTimeout = time.Minute
)

// BundleErrors is the file of the bundle that lists what could not be read.
const BundleErrors = "errors.txt"

// WriteSupportBundle assembles a support bundle of one node from read calls
// and streams it into w as a gzip-compressed tar, one file at a time, all
// under the directory node/. What it holds follows talosctl support (the
// node collectors of siderolabs/go-talos-support, support/collectors: the
// kernel log, each service's log and state, mounts, the version and every
// COSI resource type that is not Sensitive; the Kubernetes pod logs it also
// collects through the CRI are not read here). A read that fails is listed in
// node/errors.txt and the bundle goes on; the error returned is a failure to
// write, or the node answering nothing at all.
func WriteSupportBundle(ctx context.Context, c *talosclient.Client, node string, w io.Writer) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	b := &bundleWriter{tw: tw, dir: node, now: time.Now()}

	b.add(ctx, "summary", func(ctx context.Context, out *bytes.Buffer) error {
		v, err := c.Version(ctx)
		if err != nil {
			return err
		}

		for _, m := range v.GetMessages() {
			fmt.Fprintf(out, "Tag:\t%s\nSHA:\t%s\nBuilt:\t%s\nGo version:\t%s\nOS/Arch:\t%s/%s\n",
				m.GetVersion().GetTag(), m.GetVersion().GetSha(), m.GetVersion().GetBuilt(),
				m.GetVersion().GetGoVersion(), m.GetVersion().GetOs(), m.GetVersion().GetArch())
		}

		return nil
	})
	b.add(ctx, "dmesg.log", func(ctx context.Context, out *bytes.Buffer) error {
		s, err := c.Dmesg(ctx, false, false)
		if err != nil {
			return err
		}

		return copyData(s, out)
	})
	b.add(ctx, "mounts", func(ctx context.Context, out *bytes.Buffer) error {
		resp, err := c.Mounts(ctx)
		if err != nil {
			return err
		}

		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "FILESYSTEM\tSIZE\tAVAILABLE\tMOUNTED ON")

		for _, m := range resp.GetMessages() {
			for _, s := range m.GetStats() {
				_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", s.GetFilesystem(), s.GetSize(), s.GetAvailable(), s.GetMountedOn())
			}
		}

		return tw.Flush()
	})

	b.services(ctx, c)
	b.resources(ctx, c)

	if b.wrote == 0 {
		return fmt.Errorf("node %s answered none of the support bundle's reads: %s", node, strings.Join(b.errs, "; "))
	}

	if len(b.errs) > 0 {
		b.put(BundleErrors, []byte(strings.Join(b.errs, "\n")+"\n"))
	}

	if b.werr != nil {
		return b.werr
	}

	if err := tw.Close(); err != nil {
		return err
	}

	return gz.Close()
}

// bundleWriter writes the files of a bundle and keeps what failed.
type bundleWriter struct {
	tw    *tar.Writer
	dir   string
	now   time.Time
	errs  []string
	wrote int
	werr  error
}

// add reads one file and writes it; a failed read becomes a line of errors.txt.
func (b *bundleWriter) add(ctx context.Context, name string, read func(context.Context, *bytes.Buffer) error) {
	if b.werr != nil {
		return
	}

	rctx, cancel := context.WithTimeout(ctx, entryTimeout)
	defer cancel()

	out := &bytes.Buffer{}
	err := read(rctx, out)

	if err != nil {
		b.errs = append(b.errs, fmt.Sprintf("%s: %v", name, err))

		if out.Len() == 0 {
			return
		}
	}

	if out.Len() > maxEntry {
		out.Truncate(maxEntry)
		b.errs = append(b.errs, fmt.Sprintf("%s: cut at %d MiB", name, maxEntry>>20))
	}

	b.put(name, out.Bytes())

	if b.werr == nil {
		b.wrote++
	}
}

func (b *bundleWriter) put(name string, data []byte) {
	if b.werr != nil {
		return
	}

	hdr := &tar.Header{Name: path.Join(b.dir, name), Mode: 0o644, Size: int64(len(data)), ModTime: b.now, Typeflag: tar.TypeReg}
	if err := b.tw.WriteHeader(hdr); err != nil {
		b.werr = err

		return
	}

	if _, err := b.tw.Write(data); err != nil {
		b.werr = err
	}
}

// services writes each service's state and the last BundleLogLines of its log.
func (b *bundleWriter) services(ctx context.Context, c *talosclient.Client) {
	lctx, cancel := context.WithTimeout(ctx, entryTimeout)
	resp, err := c.ServiceList(lctx)

	cancel()

	if err != nil {
		b.errs = append(b.errs, fmt.Sprintf("service-logs: listing the services: %v", err))

		return
	}

	for _, m := range resp.GetMessages() {
		for _, svc := range m.GetServices() {
			id := svc.GetId()

			b.add(ctx, "service-logs/"+id+".state", func(_ context.Context, out *bytes.Buffer) error {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				_, _ = fmt.Fprintf(tw, "ID\t%s\nSTATE\t%s\n", id, svc.GetState())

				if h := svc.GetHealth(); h != nil {
					health := "?"
					if !h.GetUnknown() {
						health = map[bool]string{true: "OK", false: "Fail"}[h.GetHealthy()]
					}

					_, _ = fmt.Fprintf(tw, "HEALTH\t%s\n", health)

					if h.GetLastMessage() != "" {
						_, _ = fmt.Fprintf(tw, "LAST HEALTH MESSAGE\t%s\n", h.GetLastMessage())
					}
				}

				for _, e := range svc.GetEvents().GetEvents() {
					_, _ = fmt.Fprintf(tw, "EVENT\t%s [%s]: %s\n", e.GetTs().AsTime().Format(time.RFC3339), e.GetState(), e.GetMsg())
				}

				return tw.Flush()
			})
			b.add(ctx, "service-logs/"+id+".log", func(ctx context.Context, out *bytes.Buffer) error {
				s, err := c.Logs(ctx, constants.SystemContainerdNamespace, common.ContainerDriver_CONTAINERD, id, false, BundleLogLines)
				if err != nil {
					return err
				}

				return copyData(s, out)
			})
		}
	}
}

// resources writes every COSI resource type that is not Sensitive, one YAML
// file per type (metadata and spec of each resource), under resources/.
func (b *bundleWriter) resources(ctx context.Context, c *talosclient.Client) {
	lctx, cancel := context.WithTimeout(ctx, entryTimeout)
	rds, err := safe.StateListAll[*meta.ResourceDefinition](lctx, c.COSI)

	cancel()

	if err != nil {
		b.errs = append(b.errs, fmt.Sprintf("resources: listing the resource definitions: %v", err))

		return
	}

	for rd := range rds.All() {
		spec := rd.TypedSpec()
		if spec.Sensitivity == meta.Sensitive {
			continue
		}

		b.add(ctx, "resources/"+rd.Metadata().ID()+".yaml", func(ctx context.Context, out *bytes.Buffer) error {
			list, err := c.COSI.List(ctx, resource.NewMetadata(spec.DefaultNamespace, spec.Type, "", resource.VersionUndefined),
				state.WithListUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
			if err != nil {
				return err
			}

			enc := yaml.NewEncoder(out)

			for _, r := range list.Items {
				if err := enc.Encode(&struct {
					Metadata *resource.Metadata `yaml:"metadata"`
					Spec     any                `yaml:"spec"`
				}{r.Metadata(), r.Spec()}); err != nil {
					return err
				}
			}

			return enc.Close()
		})
	}
}

// dataStream is a Talos stream of common.Data (Logs, Dmesg).
type dataStream interface {
	Recv() (*common.Data, error)
}

// copyData copies a finished stream into out, at most maxEntry+1 bytes.
func copyData(s dataStream, out *bytes.Buffer) error {
	for {
		msg, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return err
		}

		out.Write(msg.GetBytes())

		if out.Len() > maxEntry {
			return nil
		}
	}
}
