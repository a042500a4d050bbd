#include "telemetry/ring_buffer.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cosched::telemetry {
namespace {

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// absl's strip on this file's std::string_views (absl 20220623 as Debian
// builds it has its own string_view).
std::string_view Trim(std::string_view s) {
  absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size()));
  return std::string_view(t.data(), t.size());
}

// The number after "key:" up to ';' in `line`.
bool NumberAfter(std::string_view line, std::string_view key, int64_t* out) {
  size_t k = line.find(key);
  if (k == std::string_view::npos) return false;
  std::string_view rest = Trim(line.substr(k + key.size()));
  size_t semi = rest.find(';');
  if (semi == std::string_view::npos) return false;
  std::string_view num = Trim(rest.substr(0, semi));
  auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), *out);
  return ec == std::errc() && ptr == num.data() + num.size() && !num.empty();
}

absl::Status FieldError(int line_no, std::string_view line, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("format line ", line_no, ": ", Absl(why), ": '", Absl(Trim(line)), "'"));
}

absl::StatusOr<FormatField> ParseField(std::string_view line, int line_no) {
  std::string_view rest = Trim(line).substr(std::string_view("field:").size());
  size_t semi = rest.find(';');
  if (semi == std::string_view::npos) return FieldError(line_no, line, "no ';' after the field");
  std::string_view decl = Trim(rest.substr(0, semi));
  std::string_view attrs = rest.substr(semi + 1);
  FormatField f;
  std::string_view array;
  if (!decl.empty() && decl.back() == ']') {
    size_t open = decl.rfind('[');
    if (open == std::string_view::npos) return FieldError(line_no, line, "unbalanced '['");
    array = decl.substr(open);
    decl = Trim(decl.substr(0, open));
  }
  size_t space = decl.find_last_of(" \t*");
  if (space == std::string_view::npos || space + 1 == decl.size())
    return FieldError(line_no, line, "no field name");
  f.name = std::string(decl.substr(space + 1));
  f.type = std::string(Trim(decl.substr(0, decl[space] == '*' ? space + 1 : space)));
  f.type.append(array.data(), array.size());
  int64_t offset = 0, size = 0, is_signed = 0;
  if (!NumberAfter(attrs, "offset:", &offset) || !NumberAfter(attrs, "size:", &size) ||
      offset < 0 || size < 0 || offset > UINT16_MAX || size > UINT16_MAX)
    return FieldError(line_no, line, "bad offset or size");
  if (NumberAfter(attrs, "signed:", &is_signed)) f.is_signed = is_signed != 0;
  f.offset = static_cast<uint32_t>(offset);
  f.size = static_cast<uint32_t>(size);
  return f;
}

absl::StatusOr<FieldSlot> IntSlot(const EventFormat& format, std::string_view name) {
  const FormatField* f = format.Find(name);
  if (f == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("format has no field '", Absl(name), "'"));
  if (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8)
    return absl::InvalidArgumentError(
        absl::StrCat("field '", Absl(name), "' has size ", f->size, ", not 1, 2, 4 or 8"));
  return FieldSlot{f->offset, f->size, f->is_signed};
}

FieldSlot CommSlot(const EventFormat& format, std::string_view name) {
  const FormatField* f = format.Find(name);
  if (f == nullptr) return FieldSlot{};
  return FieldSlot{f->offset, f->size, false};
}

}  // namespace

const FormatField* EventFormat::Find(std::string_view field_name) const {
  for (const FormatField& f : fields)
    if (f.name == field_name) return &f;
  return nullptr;
}

absl::StatusOr<EventFormat> ParseEventFormat(std::string_view text) {
  EventFormat format;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    std::string_view t = Trim(line);
    if (t.starts_with("field:")) {
      auto field = ParseField(line, line_no);
      if (!field.ok()) return field.status();
      format.fields.push_back(std::move(*field));
    } else if (t.starts_with("name:")) {
      format.name = std::string(Trim(t.substr(5)));
    } else if (t.starts_with("ID:")) {
      std::string_view id = Trim(t.substr(3));
      auto [ptr, ec] = std::from_chars(id.data(), id.data() + id.size(), format.id);
      if (ec != std::errc() || ptr != id.data() + id.size() || format.id < 0)
        return FieldError(line_no, line, "bad ID");
    } else if (t.starts_with("print fmt:")) {
      break;  // the rest is the print format, which may span anything
    }
  }
  return format;
}

absl::StatusOr<SchedSwitchLayout> SchedSwitchLayout::FromFormat(std::string_view format_text) {
  auto format = ParseEventFormat(format_text);
  if (!format.ok()) return format.status();
  if (!format->name.empty() && format->name != "sched_switch")
    return absl::InvalidArgumentError(
        absl::StrCat("format is of event '", format->name, "', not sched_switch"));
  if (format->id < 0 || format->id > UINT16_MAX)
    return absl::InvalidArgumentError("format has no valid ID line");
  SchedSwitchLayout layout;
  layout.event_id = static_cast<uint32_t>(format->id);
  for (auto [slot, name] : {std::pair{&layout.common_type, "common_type"},
                            std::pair{&layout.prev_pid, "prev_pid"},
                            std::pair{&layout.prev_state, "prev_state"},
                            std::pair{&layout.next_pid, "next_pid"}}) {
    auto s = IntSlot(*format, name);
    if (!s.ok()) return s.status();
    *slot = *s;
  }
  layout.prev_comm = CommSlot(*format, "prev_comm");
  layout.next_comm = CommSlot(*format, "next_comm");
  for (const FieldSlot& s : {layout.common_type, layout.prev_pid, layout.prev_state,
                             layout.next_pid, layout.prev_comm, layout.next_comm})
    layout.min_record_size = std::max(layout.min_record_size, s.offset + s.size);
  return layout;
}

absl::StatusOr<PageHeaderLayout> PageHeaderLayout::FromHeaderPage(std::string_view header_page_text) {
  auto format = ParseEventFormat(header_page_text);
  if (!format.ok()) return format.status();
  PageHeaderLayout layout;
  auto ts = IntSlot(*format, "timestamp");
  if (!ts.ok()) return ts.status();
  auto commit = IntSlot(*format, "commit");
  if (!commit.ok()) return commit.status();
  const FormatField* data = format->Find("data");
  if (data == nullptr) return absl::InvalidArgumentError("header_page has no field 'data'");
  layout.timestamp = *ts;
  layout.timestamp.is_signed = false;
  layout.commit = *commit;
  layout.commit.is_signed = false;
  layout.data_offset = data->offset;
  if (layout.data_offset < layout.timestamp.offset + layout.timestamp.size ||
      layout.data_offset < layout.commit.offset + layout.commit.size)
    return absl::InvalidArgumentError("header_page: data overlaps timestamp or commit");
  return layout;
}

absl::Status RingBufferPageReader::Malformed(int32_t cpu, size_t offset, const char* what) {
  ++counts_.malformed_pages;
  return absl::InvalidArgumentError(
      absl::StrCat("cpu ", cpu, " ring-buffer page, data offset ", offset, ": ", what));
}

}  // namespace cosched::telemetry
