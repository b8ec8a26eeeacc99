package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one validation failure. Its text is byte-for-byte what
// k8s.io/apimachinery's field.Error prints, so a user sees the same message
// from the supervisor, the injector and the API server.
type FieldError struct {
	Field string // path such as spec.containers[0].restartPolicyRules[1].action
	Body  string // such as `Unsupported value: "Foo": supported values: "In", "NotIn"`
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Body }

// ErrorList is the result of a validation; nil means valid.
type ErrorList []*FieldError

// Error joins the messages on one line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Err returns the list as an error, or nil when it is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

func join(prefix, child string) string {
	if prefix == "" {
		return child
	}
	return prefix + "." + child
}

func required(field, detail string) *FieldError {
	return &FieldError{field, "Required value: " + detail}
}

func notSupported(field, value string, supported string) *FieldError {
	return &FieldError{field, fmt.Sprintf("Unsupported value: %s: supported values: %s", strconv.Quote(value), supported)}
}

func tooMany(field string, actual, max int) *FieldError {
	return &FieldError{field, fmt.Sprintf("Too many: %d: must have at most %d items", actual, max)}
}

func quoteAll(values []string) string {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// Validate checks a regular container's restart fields the way the API
// server's validateContainerRestartPolicy does with the ContainerRestartRules
// and RestartAllContainersOnContainerExits gates on. path is the container's
// field path ("" for a bare supervisor config).
func Validate(c Container, path string) ErrorList {
	var errs ErrorList
	if c.RestartPolicy == nil {
		if len(c.RestartPolicyRules) == 0 {
			return nil
		}
		errs = append(errs, required(join(path, "restartPolicy"), "must specify restartPolicy when restart rules are used"))
	} else {
		switch *c.RestartPolicy {
		case Always, Never, OnFailure:
		default:
			errs = append(errs, notSupported(join(path, "restartPolicy"), string(*c.RestartPolicy), supportedPolicies))
		}
	}
	rulesPath := join(path, "restartPolicyRules")
	if n := len(c.RestartPolicyRules); n > MaxRules {
		errs = append(errs, tooMany(rulesPath, n, MaxRules))
	}
	for i, r := range c.RestartPolicyRules {
		rp := fmt.Sprintf("%s[%d]", rulesPath, i)
		switch r.Action {
		case ActionRestart, ActionRestartAllContainers:
		default:
			errs = append(errs, notSupported(rp+".action", string(r.Action), quoteAll(supportedActions)))
		}
		if r.ExitCodes == nil {
			errs = append(errs, required(rp+".exitCodes", "must be specified"))
			continue
		}
		switch r.ExitCodes.Operator {
		case OpIn, OpNotIn:
		default:
			errs = append(errs, notSupported(rp+".exitCodes.operator", string(r.ExitCodes.Operator), quoteAll(supportedOperators)))
		}
		if n := len(r.ExitCodes.Values); n > MaxValuesPerRule {
			errs = append(errs, tooMany(rp+".exitCodes.values", n, MaxValuesPerRule))
		}
	}
	return errs
}

// ValidatePodPolicy checks a pod restartPolicy the way the API server does.
func ValidatePodPolicy(p RestartPolicy, field string) ErrorList {
	switch p {
	case Always, OnFailure, Never:
		return nil
	case "":
		return ErrorList{required(field, "")}
	}
	return ErrorList{notSupported(field, string(p), "\"Always\", \"OnFailure\", \"Never\"")}
}
