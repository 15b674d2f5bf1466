package talosemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// MachineInfo is what the control API reports about a machine.
type MachineInfo struct {
	Name                   string    `json:"name"`
	Address                string    `json:"address"`
	Endpoint               string    `json:"endpoint"`
	RoleHint               string    `json:"roleHint,omitempty"`
	UUID                   string    `json:"uuid"`
	Serial                 string    `json:"serial"`
	Manufacturer           string    `json:"manufacturer"`
	MACs                   []string  `json:"macs"`
	Powered                bool      `json:"powered"`
	Hung                   bool      `json:"hung"`
	Stage                  string    `json:"stage"`
	Maintenance            bool      `json:"maintenance"`
	MachineType            string    `json:"machineType,omitempty"`
	RollbackPending        bool      `json:"rollbackPending"`
	Installed              bool      `json:"installed"`
	Version                string    `json:"version"`
	Schematic              string    `json:"schematic"`
	Slot                   string    `json:"slot"`
	PendingVersion         string    `json:"pendingVersion,omitempty"`
	FailNextUpgrade        bool      `json:"failNextUpgrade"`
	LastUpgradeFailed      bool      `json:"lastUpgradeFailed"`
	BootID                 string    `json:"bootID"`
	Boots                  int       `json:"boots"`
	MaintenanceFingerprint string    `json:"maintenanceFingerprint"`
	Durations              Durations `json:"durations"`
}

// Info returns a snapshot of the machine for the control API.
func (m *Machine) Info() MachineInfo {
	d := m.durations()

	m.mu.Lock()
	defer m.mu.Unlock()

	version, schematic := m.runningVersionLocked()
	info := MachineInfo{
		Name:                   m.p.Hardware.Name,
		Address:                m.p.Hardware.Address,
		Endpoint:               m.Address(),
		RoleHint:               m.p.Hardware.Role,
		UUID:                   m.p.Hardware.UUID,
		Serial:                 m.p.Hardware.Serial,
		Manufacturer:           m.p.Hardware.Manufacturer,
		Powered:                m.p.Powered,
		Hung:                   m.hung,
		Stage:                  m.stage.String(),
		Maintenance:            m.inMaintenanceLocked(),
		Installed:              m.p.Installed,
		Version:                version,
		Schematic:              schematic,
		Slot:                   m.p.Slot,
		FailNextUpgrade:        m.p.FailNextUpgrade,
		LastUpgradeFailed:      m.p.LastUpgradeFailed,
		BootID:                 m.p.BootID,
		Boots:                  m.p.Boots,
		MaintenanceFingerprint: fingerprint(m.maintCert),
		Durations:              d,
	}

	info.RollbackPending = m.rollback != nil

	if m.active != nil && m.active.Machine() != nil {
		info.MachineType = m.active.Machine().Type().String()
	}

	for _, l := range m.p.Hardware.Links {
		info.MACs = append(info.MACs, l.MAC)
	}

	if m.p.Pending != nil {
		info.PendingVersion = m.p.Pending.Version
	}

	return info
}

func (w *World) startControl(addr string) error {
	if err := checkLoopback(addr); err != nil {
		return err
	}

	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("control API: cannot listen on %s: %w", addr, err)
	}

	w.controlAddr = lis.Addr().String()
	w.control = &http.Server{Handler: w.controlHandler(), ReadHeaderTimeout: 10 * time.Second}

	go w.control.Serve(lis) //nolint:errcheck // returns on Shutdown

	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("control address %q: %w", addr, err)
	}

	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("control address %q must be on loopback", addr)
	}

	return nil
}

type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, err: fmt.Errorf(format, args...)}
}

// controlHandler serves the control API documented in README.md.
func (w *World) controlHandler() http.Handler {
	mux := http.NewServeMux()

	handle := func(pattern string, fn func(r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(rw http.ResponseWriter, r *http.Request) {
			out, err := fn(r)
			rw.Header().Set("Content-Type", "application/json")

			if err != nil {
				code := http.StatusInternalServerError

				var he *httpError
				if errors.As(err, &he) {
					code = he.code
				}

				rw.WriteHeader(code)
				_ = json.NewEncoder(rw).Encode(map[string]string{"error": err.Error()})

				return
			}

			if out == nil {
				out = map[string]string{"status": "ok"}
			}

			_ = json.NewEncoder(rw).Encode(out)
		})
	}

	machineOf := func(r *http.Request) (*Machine, error) {
		m, err := w.Machine(r.PathValue("name"))
		if err != nil {
			return nil, &httpError{code: http.StatusNotFound, err: err}
		}

		return m, nil
	}

	action := func(pattern string, fn func(m *Machine, r *http.Request) (any, error)) {
		handle(pattern, func(r *http.Request) (any, error) {
			m, err := machineOf(r)
			if err != nil {
				return nil, err
			}

			return fn(m, r)
		})
	}

	handle("GET /machines", func(*http.Request) (any, error) {
		out := make([]MachineInfo, 0, len(w.machines))
		for _, m := range w.machines {
			out = append(out, m.Info())
		}

		return out, nil
	})

	action("GET /machines/{name}", func(m *Machine, _ *http.Request) (any, error) { return m.Info(), nil })
	action("POST /machines/{name}/power-off", func(m *Machine, _ *http.Request) (any, error) { return nil, m.PowerOff() })
	action("POST /machines/{name}/power-on", func(m *Machine, _ *http.Request) (any, error) { return nil, m.PowerOn() })
	action("POST /machines/{name}/wipe-disk", func(m *Machine, _ *http.Request) (any, error) { return nil, m.WipeSystemDisk() })
	action("POST /machines/{name}/hang", func(m *Machine, _ *http.Request) (any, error) { return nil, m.SetHung(true) })
	action("POST /machines/{name}/unhang", func(m *Machine, _ *http.Request) (any, error) { return nil, m.SetHung(false) })
	action("POST /machines/{name}/fail-next-upgrade", func(m *Machine, r *http.Request) (any, error) {
		body := struct {
			Fail *bool `json:"fail"`
		}{}

		if err := decodeOptional(r, &body); err != nil {
			return nil, err
		}

		fail := body.Fail == nil || *body.Fail

		return nil, m.FailNextUpgrade(fail)
	})
	action("POST /machines/{name}/replace-maintenance-cert", func(m *Machine, _ *http.Request) (any, error) {
		fp, err := m.ReplaceMaintenanceCert()
		if err != nil {
			return nil, err
		}

		return map[string]string{"fingerprint": fp}, nil
	})
	action("PUT /machines/{name}/durations", func(m *Machine, r *http.Request) (any, error) {
		var d Durations
		if err := decodeOptional(r, &d); err != nil {
			return nil, err
		}

		return nil, m.SetDurations(&d)
	})
	action("DELETE /machines/{name}/durations", func(m *Machine, _ *http.Request) (any, error) { return nil, m.SetDurations(nil) })
	action("GET /machines/{name}/rpcs", func(m *Machine, _ *http.Request) (any, error) { return m.RPCCounts(), nil })
	action("GET /machines/{name}/forwarded", func(m *Machine, _ *http.Request) (any, error) { return m.ForwardedCounts(), nil })
	action("DELETE /machines/{name}/rpcs", func(m *Machine, _ *http.Request) (any, error) {
		m.ResetRPCCounts()

		return nil, nil
	})
	handle("PUT /durations", func(r *http.Request) (any, error) {
		var d Durations
		if err := decodeOptional(r, &d); err != nil {
			return nil, err
		}

		w.SetDurations(d)

		return w.durations(), nil
	})
	handle("GET /durations", func(*http.Request) (any, error) { return w.durations(), nil })
	handle("GET /flows", func(*http.Request) (any, error) { return w.Flows(), nil })
	w.releaseRoutes(handle)
	w.kubeVersionRoutes(handle, action)

	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(rw).Encode(map[string]string{"error": fmt.Sprintf("no control API route %s %s; see tools/talosemu/README.md", r.Method, r.URL.Path)})
	})

	return mux
}

func decodeOptional(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return badRequest("reading body: %v", err)
	}

	if strings.TrimSpace(string(b)) == "" {
		return nil
	}

	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()

	if err := dec.Decode(v); err != nil {
		return badRequest("malformed JSON body: %v", err)
	}

	return nil
}
