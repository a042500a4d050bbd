// lab_sibling_share: the lab's own sibling-sharing figures from a tracefs
// sched_switch trace. See sibling_share.h for the definitions.
//
//   lab_sibling_share --trace FILE [--core 0-1 --core 2-3 | (sysfs topology)]
//                     (--group NAME=PID[,PID...] | --group-tids NAME=TID[,TID...]
//                      | --map FILE)... [--text]
//
// --group takes every thread of each PID from /proc at the time of the call,
// so run it while the processes still live. --map reads "TID GROUP" lines.
// Prints JSON (or, with --text, one line per group:
// "group run_ms same% idle% foreign% unknown% foreign_intervals longest_foreign_us").
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "sibling_share.h"

namespace {

using cosched::lab::ParseCpuList;
using cosched::lab::SiblingShareInput;

int Usage() {
  fprintf(stderr,
          "usage: lab_sibling_share --trace FILE [--core CPULIST]... [--text]\n"
          "         (--group NAME=PID[,PID...] | --group-tids NAME=TID[,TID...] | --map FILE)...\n");
  return 2;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// "NAME=1,2,3" -> name and numbers.
bool SplitAssignment(const std::string& arg, std::string* name, std::vector<long>* ids) {
  size_t eq = arg.find('=');
  if (eq == 0 || eq == std::string::npos) return false;
  *name = arg.substr(0, eq);
  std::stringstream ss(arg.substr(eq + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0) return false;
    ids->push_back(v);
  }
  return !ids->empty();
}

bool AddProcessThreads(long pid, const std::string& group, SiblingShareInput* in) {
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (!d) {
    fprintf(stderr, "lab_sibling_share: %s: %s\n", dir.c_str(), strerror(errno));
    return false;
  }
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    in->tid_group[strtoll(e->d_name, nullptr, 10)] = group;
  }
  closedir(d);
  return true;
}

bool ReadSysfsTopology(std::map<int, std::vector<int>>* lists) {
  for (int cpu = 0;; ++cpu) {
    std::string text;
    std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list";
    if (!ReadFile(path, &text)) break;
    auto list = ParseCpuList(text);
    if (!list) {
      fprintf(stderr, "lab_sibling_share: %s: cannot parse '%s'\n", path.c_str(), text.c_str());
      return false;
    }
    (*lists)[cpu] = *list;
  }
  if (lists->empty()) {
    fprintf(stderr, "lab_sibling_share: no CPU topology under /sys/devices/system/cpu\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_path;
  bool text = false;
  std::map<int, std::vector<int>> lists;
  SiblingShareInput in;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--text") {
      text = true;
    } else if (a == "--trace") {
      const char* v = value();
      if (!v) return Usage();
      trace_path = v;
    } else if (a == "--core") {
      const char* v = value();
      auto list = v ? ParseCpuList(v) : std::nullopt;
      if (!list || list->empty()) return Usage();
      for (int cpu : *list) lists[cpu] = *list;
    } else if (a == "--group" || a == "--group-tids") {
      const char* v = value();
      std::string name;
      std::vector<long> ids;
      if (!v || !SplitAssignment(v, &name, &ids)) return Usage();
      for (long id : ids) {
        if (a == "--group-tids") {
          in.tid_group[id] = name;
        } else if (!AddProcessThreads(id, name, &in)) {
          return 1;
        }
      }
    } else if (a == "--map") {
      const char* v = value();
      std::string content;
      if (!v) return Usage();
      if (!ReadFile(v, &content)) {
        fprintf(stderr, "lab_sibling_share: cannot read %s\n", v);
        return 1;
      }
      std::istringstream ss(content);
      long long tid;
      std::string group;
      while (ss >> tid >> group) in.tid_group[tid] = group;
    } else {
      return Usage();
    }
  }
  if (trace_path.empty() || in.tid_group.empty()) return Usage();
  if (lists.empty() && !ReadSysfsTopology(&lists)) return 1;
  in.siblings = cosched::lab::SiblingsFromLists(lists);

  std::string trace;
  if (!ReadFile(trace_path, &trace)) {
    fprintf(stderr, "lab_sibling_share: cannot read %s\n", trace_path.c_str());
    return 1;
  }
  cosched::lab::ParseTraceText(trace, &in);
  if (in.events.empty()) {
    fprintf(stderr, "lab_sibling_share: no sched_switch events in %s\n", trace_path.c_str());
    return 1;
  }
  auto report = cosched::lab::ComputeSiblingShare(std::move(in));
  fputs((text ? ReportToText(report) : ReportToJson(report)).c_str(), stdout);
  return 0;
}
