// Durable file writing: whole-or-nothing replacement, temporaries that never outlive a
// write, and errors that name the file and say plainly when the disk is full.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <cerrno>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>
import kvlab;

using namespace kvlab_test;

namespace {

std::string error_of(auto&& write) { return kvlab_test::message_of<kvlab::error>(write); }

} // namespace

BOOST_AUTO_TEST_SUITE(durable_file)

BOOST_AUTO_TEST_CASE(atomic_write_replaces_the_file_and_leaves_no_temporary) {
  const scratch_directory dir("durable");
  kvlab::write_text_atomically(dir.path() / "table.md", "first\n");
  kvlab::write_text_atomically(dir.path() / "table.md", "second\n");
  BOOST_TEST(dir.read("table.md") == "second\n");
  BOOST_TEST(dir.entries() == std::vector<std::string>{"table.md"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(failed_atomic_write_keeps_the_old_contents_and_removes_its_temporary) {
  const scratch_directory dir("durable_failed");
  const auto file = dir.write("table.md", "old\n");
  BOOST_CHECK_THROW(kvlab::write_file_atomically(file, "'table.md'",
                                                 [](kvlab::file_output& out) {
                                                   out.write("half of the new");
                                                   throw kvlab::error("the writer gave up");
                                                 }),
                    kvlab::error);
  BOOST_TEST(dir.read("table.md") == "old\n");
  BOOST_TEST(dir.entries() == std::vector<std::string>{"table.md"}, boost::test_tools::per_element());

  // A rename that fails (the target is a folder) names the file and cleans up.
  std::filesystem::create_directory(dir.path() / "taken");
  const std::string taken = error_of([&] { kvlab::write_text_atomically(dir.path() / "taken", "x"); });
  BOOST_TEST(contains(taken, "'" + (dir.path() / "taken").string() + "': cannot replace it"), taken);
  BOOST_TEST(dir.entries().size() == 2u);
}

BOOST_AUTO_TEST_CASE(write_into_a_missing_folder_names_the_file_and_the_reason) {
  const auto file = unique_temp_path("missing") / "table.md";
  const std::string message = error_of([&] { kvlab::write_text_atomically(file, "x"); });
  BOOST_TEST(contains(message, "'" + file.string() + "': cannot create the temporary file"), message);
  BOOST_TEST(contains(message, "No such file or directory"), message);
  const std::string durable = error_of([&] { kvlab::write_file_durably(file, "x"); });
  BOOST_TEST(contains(durable, "'" + file.string() + "': cannot write: No such file or directory"), durable);
  const std::string sync = error_of([&] { kvlab::sync_to_disk(file); });
  BOOST_TEST(contains(sync, "'" + file.string() + "': cannot sync to disk"), sync);
}

// /dev/full fails every write with ENOSPC, as a full disk does.
BOOST_AUTO_TEST_CASE(full_disk_says_no_space_left_on_device) {
  if (!std::filesystem::exists("/dev/full")) {
    BOOST_TEST_MESSAGE("/dev/full is absent: the full-disk write is not exercised");
    return;
  }
  const std::string message = error_of([] { kvlab::write_file_durably("/dev/full", "metrics"); });
  BOOST_TEST(message == "'/dev/full': cannot write: no space left on device");
}

BOOST_AUTO_TEST_CASE(quota_exceeded_also_says_no_space_left_on_device) {
  BOOST_TEST(kvlab::io_error_text(ENOSPC) == "no space left on device");
  BOOST_TEST(kvlab::io_error_text(EDQUOT) == "no space left on device");
  BOOST_TEST(kvlab::io_error_text(ENOENT) == "No such file or directory");
}

BOOST_AUTO_TEST_CASE(unique_name_parts_start_with_the_process_id_and_never_repeat) {
  const std::string first = kvlab::unique_name_part(), second = kvlab::unique_name_part();
  BOOST_TEST(first != second);
  BOOST_TEST(first.starts_with(std::to_string(::getpid()) + "-"), first);
}

BOOST_AUTO_TEST_SUITE_END()
