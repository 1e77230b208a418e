package fakemodel

import (
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// sse writes server-sent events and flushes after each one.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func startSSE(w http.ResponseWriter, requestIDHeader, requestID string) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set(requestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one event; name "" writes a data-only event.
func (e *sse) send(name string, v any) {
	if e.err != nil {
		return
	}
	data, err := marshalJSON(v)
	if err != nil {
		e.err = err
		return
	}
	e.raw(name, string(data))
}

func (e *sse) raw(name, data string) {
	if e.err != nil {
		return
	}
	msg := "data: " + data + "\n\n"
	if name != "" {
		msg = "event: " + name + "\n" + msg
	}
	if _, e.err = e.w.Write([]byte(msg)); e.err == nil {
		e.err = e.rc.Flush()
	}
}

// pieces splits s into a few deltas on rune boundaries, as real APIs
// stream text; clients must concatenate them.
func pieces(s string) []string {
	if s == "" {
		return nil
	}
	size := max(8, (len(s)+31)/32) // at most about 32 deltas
	var out []string
	for len(s) > 0 {
		n := min(size, len(s))
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func reasoningTokens(rp reply) int {
	if rp.thinking == "" {
		return 0
	}
	return min(estimateTokens(len(rp.thinking)), rp.usage.OutputTokens)
}

// ---- OpenAI chat completions ----

func (s *Server) writeChat(w http.ResponseWriter, req completionReq, rp reply) {
	id := s.newID("chatcmpl-fake")
	created := time.Now().Unix()
	model := req.model()
	finish := "stop"
	if rp.stopForTool() {
		finish = "tool_calls"
	}
	usage := map[string]any{
		"prompt_tokens":             rp.usage.InputTokens,
		"completion_tokens":         rp.usage.OutputTokens,
		"total_tokens":              rp.usage.InputTokens + rp.usage.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": reasoningTokens(rp)},
	}
	callID := s.newID("call_fake")

	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if rp.text != "" {
			msg["content"] = rp.text
		}
		if rp.thinking != "" {
			msg["reasoning_content"] = rp.thinking
		}
		if rp.call != nil {
			msg["tool_calls"] = []any{map[string]any{
				"id": callID, "type": "function",
				"function": map[string]any{"name": rp.call.Name, "arguments": rp.call.Arguments},
			}}
		}
		w.Header().Set("x-request-id", id)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}

	e := startSSE(w, "x-request-id", id)
	chunk := func(delta map[string]any, finish any, extra map[string]any) {
		obj := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		for k, v := range extra {
			obj[k] = v
		}
		e.send("", obj)
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	// reasoning_content is what opencode, pi and dsh read (DeepSeek style).
	for _, p := range pieces(rp.thinking) {
		chunk(map[string]any{"reasoning_content": p}, nil, nil)
	}
	for _, p := range pieces(rp.text) {
		chunk(map[string]any{"content": p}, nil, nil)
	}
	if rp.call != nil {
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": 0, "id": callID, "type": "function",
			"function": map[string]any{"name": rp.call.Name, "arguments": ""},
		}}}, nil, nil)
		for _, p := range pieces(rp.call.Arguments) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": 0, "function": map[string]any{"arguments": p},
			}}}, nil, nil)
		}
	}
	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if includeUsage {
		chunk(map[string]any{}, finish, nil)
		e.send("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage,
		})
	} else {
		// Without stream_options.include_usage, report usage on the last
		// chunk (as DeepSeek does) so it is never missing.
		chunk(map[string]any{}, finish, map[string]any{"usage": usage})
	}
	e.raw("", "[DONE]")
}

// ---- OpenAI Responses ----

func (s *Server) writeResponses(w http.ResponseWriter, req completionReq, rp reply) {
	respID := s.newID("resp_fake")
	created := time.Now().Unix()
	model := req.model()
	usage := map[string]any{
		"input_tokens":          rp.usage.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": 0},
		"output_tokens":         rp.usage.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": reasoningTokens(rp)},
		"total_tokens":          rp.usage.InputTokens + rp.usage.OutputTokens,
	}
	response := func(status string, output []any) map[string]any {
		r := map[string]any{
			"id": respID, "object": "response", "created_at": created, "status": status,
			"model": model, "output": output, "error": nil, "incomplete_details": nil,
			"parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
		}
		if status == "completed" {
			r["usage"] = usage
		} else {
			r["usage"] = nil
		}
		return r
	}

	// The finished items, in order.
	var items []map[string]any
	if rp.thinking != "" {
		items = append(items, map[string]any{
			"type": "reasoning", "id": s.newID("rs_fake"),
			"summary": []any{map[string]any{"type": "summary_text", "text": rp.thinking}},
		})
	}
	if rp.text != "" {
		items = append(items, map[string]any{
			"type": "message", "id": s.newID("msg_fake"), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": rp.text, "annotations": []any{}}},
		})
	}
	if rp.call != nil {
		items = append(items, map[string]any{
			"type": "function_call", "id": s.newID("fc_fake"), "call_id": s.newID("call_fake"),
			"name": rp.call.Name, "arguments": rp.call.Arguments, "status": "completed",
		})
	}
	output := make([]any, len(items))
	for i, it := range items {
		output[i] = it
	}

	if !req.Stream {
		w.Header().Set("x-request-id", respID)
		writeJSON(w, http.StatusOK, response("completed", output))
		return
	}

	e := startSSE(w, "x-request-id", respID)
	seq := 0
	ev := func(obj map[string]any) {
		obj["sequence_number"] = seq
		seq++
		e.send(obj["type"].(string), obj)
	}
	ev(map[string]any{"type": "response.created", "response": response("in_progress", []any{})})
	ev(map[string]any{"type": "response.in_progress", "response": response("in_progress", []any{})})
	for idx, item := range items {
		itemID := item["id"]
		switch item["type"] {
		case "reasoning":
			ev(map[string]any{"type": "response.output_item.added", "output_index": idx,
				"item": map[string]any{"type": "reasoning", "id": itemID, "summary": []any{}}})
			part := map[string]any{"type": "summary_text", "text": ""}
			ev(map[string]any{"type": "response.reasoning_summary_part.added", "item_id": itemID,
				"output_index": idx, "summary_index": 0, "part": part})
			for _, p := range pieces(rp.thinking) {
				ev(map[string]any{"type": "response.reasoning_summary_text.delta", "item_id": itemID,
					"output_index": idx, "summary_index": 0, "delta": p})
			}
			ev(map[string]any{"type": "response.reasoning_summary_text.done", "item_id": itemID,
				"output_index": idx, "summary_index": 0, "text": rp.thinking})
			ev(map[string]any{"type": "response.reasoning_summary_part.done", "item_id": itemID,
				"output_index": idx, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": rp.thinking}})
		case "message":
			ev(map[string]any{"type": "response.output_item.added", "output_index": idx,
				"item": map[string]any{"type": "message", "id": itemID, "role": "assistant",
					"status": "in_progress", "content": []any{}}})
			ev(map[string]any{"type": "response.content_part.added", "item_id": itemID, "output_index": idx,
				"content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
			for _, p := range pieces(rp.text) {
				ev(map[string]any{"type": "response.output_text.delta", "item_id": itemID, "output_index": idx,
					"content_index": 0, "delta": p})
			}
			ev(map[string]any{"type": "response.output_text.done", "item_id": itemID, "output_index": idx,
				"content_index": 0, "text": rp.text})
			ev(map[string]any{"type": "response.content_part.done", "item_id": itemID, "output_index": idx,
				"content_index": 0, "part": map[string]any{"type": "output_text", "text": rp.text, "annotations": []any{}}})
		case "function_call":
			ev(map[string]any{"type": "response.output_item.added", "output_index": idx,
				"item": map[string]any{"type": "function_call", "id": itemID, "call_id": item["call_id"],
					"name": item["name"], "arguments": "", "status": "in_progress"}})
			for _, p := range pieces(rp.call.Arguments) {
				ev(map[string]any{"type": "response.function_call_arguments.delta", "item_id": itemID,
					"output_index": idx, "delta": p})
			}
			ev(map[string]any{"type": "response.function_call_arguments.done", "item_id": itemID,
				"output_index": idx, "arguments": rp.call.Arguments})
		}
		ev(map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
	}
	ev(map[string]any{"type": "response.completed", "response": response("completed", output)})
}

// ---- Anthropic Messages ----

func (s *Server) writeMessages(w http.ResponseWriter, req completionReq, rp reply) {
	msgID := s.newID("msg_fake")
	model := req.model()
	stop := "end_turn"
	if rp.stopForTool() {
		stop = "tool_use"
	}
	usage := func(out int) map[string]any {
		return map[string]any{
			"input_tokens": rp.usage.InputTokens, "output_tokens": out,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		}
	}
	signature := "ZmFrZW1vZGVsLXNpZ25hdHVyZQ==" // opaque to the CLI; echoed back in history
	var blocks []map[string]any
	if rp.thinking != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": rp.thinking, "signature": signature})
	}
	if rp.text != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": rp.text})
	}
	var input json.RawMessage
	if rp.call != nil {
		input = json.RawMessage(rp.call.Arguments)
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": s.newID("toolu_fake"),
			"name": rp.call.Name, "input": input})
	}
	content := make([]any, len(blocks))
	for i, b := range blocks {
		content[i] = b
	}

	if !req.Stream {
		w.Header().Set("request-id", "req_"+msgID)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": msgID, "type": "message", "role": "assistant", "model": model, "content": content,
			"stop_reason": stop, "stop_sequence": nil, "usage": usage(rp.usage.OutputTokens),
		})
		return
	}

	e := startSSE(w, "request-id", "req_"+msgID)
	ev := func(obj map[string]any) { e.send(obj["type"].(string), obj) }
	ev(map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage(1),
	}})
	ev(map[string]any{"type": "ping"})
	for i, b := range blocks {
		switch b["type"] {
		case "thinking":
			ev(map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
			for _, p := range pieces(rp.thinking) {
				ev(map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "thinking_delta", "thinking": p}})
			}
			ev(map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "signature_delta", "signature": signature}})
		case "text":
			ev(map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			for _, p := range pieces(rp.text) {
				ev(map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": p}})
			}
		case "tool_use":
			ev(map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			for _, p := range pieces(rp.call.Arguments) {
				ev(map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
			}
		}
		ev(map[string]any{"type": "content_block_stop", "index": i})
	}
	ev(map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": usage(rp.usage.OutputTokens)})
	ev(map[string]any{"type": "message_stop"})
}
