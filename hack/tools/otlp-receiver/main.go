// Command otlp-receiver is the OTLP/HTTP trace receiver the end-to-end tests and benchmarks export
// to (tests/e2e/traces.rs). It decodes each request with the OpenTelemetry project's own protobuf
// types (go.opentelemetry.io/proto/otlp, generated from the same .proto files the Collector
// uses), checks what the specification requires of a span, and prints one JSON line per span on
// stdout. A request that breaks the protocol is refused with the status the specification gives
// (404, 405, 415 or 400), so the exporter under test sees the error a Collector would return.
//
// The first line on stdout is {"listening": "<address>"}: start it with -addr 127.0.0.1:0 and
// read the port from there.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	trace "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// span is what each stdout line holds: a span with its resource and scope, ids in hex.
type span struct {
	TraceID      string         `json:"traceId"`
	SpanID       string         `json:"spanId"`
	ParentSpanID string         `json:"parentSpanId,omitempty"`
	Name         string         `json:"name"`
	Kind         int32          `json:"kind"`
	Start        uint64         `json:"startUnixNano"`
	End          uint64         `json:"endUnixNano"`
	StatusCode   int32          `json:"statusCode"`
	StatusText   string         `json:"statusMessage,omitempty"`
	Attributes   map[string]any `json:"attributes"`
	Events       []string       `json:"events,omitempty"`
	Resource     map[string]any `json:"resource"`
	Scope        string         `json:"scope"`
}

const maxBody = 16 << 20

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "address to listen on")
	flag.Parse()
	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("otlp-receiver: %v", err)
	}
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	if err := out.Encode(map[string]string{"listening": listener.Addr().String()}); err != nil {
		log.Fatalf("otlp-receiver: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		spans, status, err := receive(r)
		if err != nil {
			log.Printf("otlp-receiver: refused: %v", err)
			http.Error(w, err.Error(), status)
			return
		}
		mu.Lock()
		for _, s := range spans {
			if err := out.Encode(s); err != nil {
				log.Fatalf("otlp-receiver: %v", err)
			}
		}
		mu.Unlock()
		body, err := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		if err != nil {
			log.Fatalf("otlp-receiver: %v", err)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(body)
	})
	log.Fatal(http.Serve(listener, mux))
}

// receive decodes one export request: (spans, status to answer, why it was refused).
func receive(r *http.Request) ([]span, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s", r.Method)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q (only binary protobuf is served here)", ct)
	}
	var body io.Reader = io.LimitReader(r.Body, maxBody)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		unzipped, err := gzip.NewReader(body)
		if err != nil {
			return nil, http.StatusBadRequest, err
		}
		body = unzipped
	default:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content encoding %q", enc)
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	var request collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &request); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("not an ExportTraceServiceRequest: %w", err)
	}
	if len(request.ProtoReflect().GetUnknown()) > 0 {
		return nil, http.StatusBadRequest, errors.New("fields unknown to the OTLP trace protocol")
	}
	var spans []span
	for _, resourceSpans := range request.ResourceSpans {
		resource := attributes(resourceSpans.GetResource().GetAttributes())
		for _, scopeSpans := range resourceSpans.ScopeSpans {
			for _, s := range scopeSpans.Spans {
				if err := check(s); err != nil {
					return nil, http.StatusBadRequest, fmt.Errorf("span %q: %w", s.Name, err)
				}
				var events []string
				for _, event := range s.Events {
					events = append(events, event.Name)
				}
				spans = append(spans, span{
					TraceID:      hex.EncodeToString(s.TraceId),
					SpanID:       hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId),
					Name:         s.Name,
					Kind:         int32(s.Kind),
					Start:        s.StartTimeUnixNano,
					End:          s.EndTimeUnixNano,
					StatusCode:   int32(s.GetStatus().GetCode()),
					StatusText:   s.GetStatus().GetMessage(),
					Attributes:   attributes(s.Attributes),
					Events:       events,
					Resource:     resource,
					Scope:        scopeSpans.GetScope().GetName(),
				})
			}
		}
	}
	return spans, http.StatusOK, nil
}

// check holds a span to what the specification requires of its ids and times.
func check(s *trace.Span) error {
	switch {
	case len(s.ProtoReflect().GetUnknown()) > 0:
		return errors.New("fields unknown to the OTLP trace protocol")
	case len(s.TraceId) != 16 || bytes.Equal(s.TraceId, make([]byte, 16)):
		return fmt.Errorf("trace id %x is not 16 bytes, not all zero", s.TraceId)
	case len(s.SpanId) != 8 || bytes.Equal(s.SpanId, make([]byte, 8)):
		return fmt.Errorf("span id %x is not 8 bytes, not all zero", s.SpanId)
	case len(s.ParentSpanId) != 0 && len(s.ParentSpanId) != 8:
		return fmt.Errorf("parent span id %x is not 8 bytes", s.ParentSpanId)
	case s.Name == "":
		return errors.New("no name")
	case s.StartTimeUnixNano == 0 || s.EndTimeUnixNano < s.StartTimeUnixNano:
		return fmt.Errorf("ends (%d) before it starts (%d)", s.EndTimeUnixNano, s.StartTimeUnixNano)
	}
	return nil
}

func attributes(list []*common.KeyValue) map[string]any {
	out := make(map[string]any, len(list))
	for _, kv := range list {
		out[kv.Key] = value(kv.Value)
	}
	return out
}

func value(v *common.AnyValue) any {
	switch v := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return v.StringValue
	case *common.AnyValue_IntValue:
		return v.IntValue
	case *common.AnyValue_DoubleValue:
		return v.DoubleValue
	case *common.AnyValue_BoolValue:
		return v.BoolValue
	case *common.AnyValue_ArrayValue:
		var items []any
		for _, item := range v.ArrayValue.Values {
			items = append(items, value(item))
		}
		return items
	case *common.AnyValue_BytesValue:
		return hex.EncodeToString(v.BytesValue)
	default:
		return nil
	}
}
