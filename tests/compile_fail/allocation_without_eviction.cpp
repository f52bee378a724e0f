// Must not compile: an allocation rule spreads an eviction policy's budget; there is none.
import kvlab;
using namespace kvlab::parts;
const kvlab::any_recipe r = kvlab::recipe{.allocation = pyramid{4}};
int main() {}
