package rules

import (
	"fmt"
	"time"
)

// Probes are the liveness, startup and readiness probes of a wrapped
// container, moved out of its spec by the injector. The supervisor runs
// liveness and startup itself, re-armed at every start of the workload;
// readiness stays with the kubelet as an exec probe of `restart-probe
// ready`, which answers with the original check while the workload runs.
type Probes struct {
	Liveness  *Probe `json:"liveness,omitempty" yaml:"liveness,omitempty"`
	Startup   *Probe `json:"startup,omitempty" yaml:"startup,omitempty"`
	Readiness *Probe `json:"readiness,omitempty" yaml:"readiness,omitempty"`
}

// Probe mirrors core/v1 Probe with every port resolved to its number (the
// injector resolves a named port against the container's ports, as the
// kubelet does). A zero timing field takes the API server's default.
type Probe struct {
	Exec                          *ExecAction      `json:"exec,omitempty" yaml:"exec,omitempty"`
	HTTPGet                       *HTTPGetAction   `json:"httpGet,omitempty" yaml:"httpGet,omitempty"`
	TCPSocket                     *TCPSocketAction `json:"tcpSocket,omitempty" yaml:"tcpSocket,omitempty"`
	GRPC                          *GRPCAction      `json:"grpc,omitempty" yaml:"grpc,omitempty"`
	InitialDelaySeconds           int32            `json:"initialDelaySeconds,omitempty" yaml:"initialDelaySeconds,omitempty"`
	TimeoutSeconds                int32            `json:"timeoutSeconds,omitempty" yaml:"timeoutSeconds,omitempty"`
	PeriodSeconds                 int32            `json:"periodSeconds,omitempty" yaml:"periodSeconds,omitempty"`
	SuccessThreshold              int32            `json:"successThreshold,omitempty" yaml:"successThreshold,omitempty"`
	FailureThreshold              int32            `json:"failureThreshold,omitempty" yaml:"failureThreshold,omitempty"`
	TerminationGracePeriodSeconds *int64           `json:"terminationGracePeriodSeconds,omitempty" yaml:"terminationGracePeriodSeconds,omitempty"`
}

// ExecAction mirrors core/v1 ExecAction.
type ExecAction struct {
	Command []string `json:"command,omitempty" yaml:"command,omitempty"`
}

// HTTPGetAction mirrors core/v1 HTTPGetAction.
type HTTPGetAction struct {
	Path        string       `json:"path,omitempty" yaml:"path,omitempty"`
	Port        int32        `json:"port,omitempty" yaml:"port,omitempty"`
	Host        string       `json:"host,omitempty" yaml:"host,omitempty"`
	Scheme      string       `json:"scheme,omitempty" yaml:"scheme,omitempty"`
	HTTPHeaders []HTTPHeader `json:"httpHeaders,omitempty" yaml:"httpHeaders,omitempty"`
}

// HTTPHeader mirrors core/v1 HTTPHeader.
type HTTPHeader struct {
	Name  string `json:"name" yaml:"name"`
	Value string `json:"value" yaml:"value"`
}

// TCPSocketAction mirrors core/v1 TCPSocketAction.
type TCPSocketAction struct {
	Port int32  `json:"port,omitempty" yaml:"port,omitempty"`
	Host string `json:"host,omitempty" yaml:"host,omitempty"`
}

// GRPCAction mirrors core/v1 GRPCAction.
type GRPCAction struct {
	Port    int32   `json:"port,omitempty" yaml:"port,omitempty"`
	Service *string `json:"service,omitempty" yaml:"service,omitempty"`
}

// Bounds of a probe in the configuration: the API server bounds a pod by
// its total size only, the supervisor each list, so that a check costs
// little to build whatever the document holds.
const (
	MaxProbeCommandArgs = 256
	MaxProbeHeaders     = 64
)

// The API server's defaults (pkg/apis/core/v1/defaults.go SetDefaults_Probe).
const (
	defaultProbeTimeout   = 1
	defaultProbePeriod    = 10
	defaultProbeSuccess   = 1
	defaultProbeFailure   = 3
	defaultHTTPScheme     = "HTTP"
	defaultHTTPGetPath    = "/"
	maxPort               = 65535
	probeHandlerFieldList = "exec, httpGet, tcpSocket, grpc"
)

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

// InitialDelay is how long after each start of the workload the probe first runs.
func (p *Probe) InitialDelay() time.Duration {
	return time.Duration(max(p.InitialDelaySeconds, 0)) * time.Second
}

// Period is the time between two checks.
func (p *Probe) Period() time.Duration {
	return time.Duration(orDefault(p.PeriodSeconds, defaultProbePeriod)) * time.Second
}

// Timeout bounds one check.
func (p *Probe) Timeout() time.Duration {
	return time.Duration(orDefault(p.TimeoutSeconds, defaultProbeTimeout)) * time.Second
}

// Failures is the failure threshold.
func (p *Probe) Failures() int { return int(orDefault(p.FailureThreshold, defaultProbeFailure)) }

// Successes is the success threshold.
func (p *Probe) Successes() int { return int(orDefault(p.SuccessThreshold, defaultProbeSuccess)) }

// Scheme is the httpGet scheme, HTTP unless set.
func (h *HTTPGetAction) SchemeOrDefault() string {
	if h.Scheme == "" {
		return defaultHTTPScheme
	}
	return h.Scheme
}

// PathOrDefault is the httpGet path, "/" unless set.
func (h *HTTPGetAction) PathOrDefault() string {
	if h.Path == "" {
		return defaultHTTPGetPath
	}
	return h.Path
}

// Handler is the name of the probe's check.
func (p *Probe) Handler() string {
	switch {
	case p.Exec != nil:
		return "exec"
	case p.HTTPGet != nil:
		return "httpGet"
	case p.TCPSocket != nil:
		return "tcpSocket"
	case p.GRPC != nil:
		return "grpc"
	}
	return ""
}

func (ps *Probes) validate(path string) ErrorList {
	if ps == nil {
		return nil
	}
	var errs ErrorList
	for _, f := range []struct {
		name string
		p    *Probe
	}{{"liveness", ps.Liveness}, {"startup", ps.Startup}, {"readiness", ps.Readiness}} {
		if f.p != nil {
			errs = append(errs, f.p.validate(path+"."+f.name, f.name != "readiness")...)
		}
	}
	return errs
}

// validate checks a probe as the API server's validateProbe does, for the
// fields the supervisor uses.
func (p *Probe) validate(path string, oneSuccess bool) ErrorList {
	var errs ErrorList
	n := 0
	for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		errs = append(errs, &FieldError{path, "Required value: must specify a handler type (" + probeHandlerFieldList + ")"})
	case n > 1:
		errs = append(errs, &FieldError{path, "Forbidden: may not specify more than 1 handler type"})
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds}, {"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold}, {"failureThreshold", p.FailureThreshold}} {
		if f.v < 0 {
			errs = append(errs, &FieldError{path + "." + f.name, fmt.Sprintf("Invalid value: %d: must be greater than or equal to 0", f.v)})
		}
	}
	if oneSuccess && p.SuccessThreshold > 1 {
		errs = append(errs, &FieldError{path + ".successThreshold", fmt.Sprintf("Invalid value: %d: must be 1", p.SuccessThreshold)})
	}
	if g := p.TerminationGracePeriodSeconds; g != nil && *g < 1 {
		errs = append(errs, &FieldError{path + ".terminationGracePeriodSeconds", fmt.Sprintf("Invalid value: %d: must be greater than 0", *g)})
	}
	port := func(field string, v int32) {
		if v < 1 || v > maxPort {
			errs = append(errs, &FieldError{field, fmt.Sprintf("Invalid value: %d: must be between 1 and 65535, inclusive", v)})
		}
	}
	switch {
	case p.Exec != nil:
		if len(p.Exec.Command) == 0 {
			errs = append(errs, &FieldError{path + ".exec.command", "Required value"})
		}
	case p.HTTPGet != nil:
		port(path+".httpGet.port", p.HTTPGet.Port)
		if s := p.HTTPGet.Scheme; s != "" && s != "HTTP" && s != "HTTPS" {
			errs = append(errs, &FieldError{path + ".httpGet.scheme", fmt.Sprintf("Unsupported value: %q: supported values: \"HTTP\", \"HTTPS\"", clip(s))})
		}
		for i, h := range p.HTTPGet.HTTPHeaders {
			if h.Name == "" {
				errs = append(errs, &FieldError{fmt.Sprintf("%s.httpGet.httpHeaders[%d].name", path, i), "Required value"})
			}
		}
	case p.TCPSocket != nil:
		port(path+".tcpSocket.port", p.TCPSocket.Port)
	case p.GRPC != nil:
		port(path+".grpc.port", p.GRPC.Port)
	}
	return errs
}

// RestartAfterProbeFailure reports whether a container killed for failing
// its liveness or startup probe is started again: upstream, "For probe
// failures, use container-level restart policy only" — the container's
// restartPolicy when it has one, else the pod's (kuberuntime_manager.go
// computePodActions, v1.34.4 and v1.35.4 alike; the rules are not
// evaluated, since the container is still running when the kill is
// decided).
func (c Config) RestartAfterProbeFailure() bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != Never
	}
	return c.Pod() != Never
}

// Validate checks the probes alone, with their paths under "probes".
func (ps *Probes) Validate() error { return ps.validate("probes").Err() }

// ValidateProbe checks one probe with its fields under path; liveness and
// startup (oneSuccess) admit no successThreshold above 1.
func ValidateProbe(p *Probe, path string, oneSuccess bool) error {
	return p.validate(path, oneSuccess).Err()
}
