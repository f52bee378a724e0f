// Must not compile: demoted tokens arrive one at a time, so per-channel groups cannot hold them.
import kvlab;
using namespace kvlab::parts;
const kvlab::any_recipe r = kvlab::recipe{.eviction = h2o{0.1, 0.1}, .demote = kvlab::stream{uint_q{2}, channel{32}}};
int main() {}
