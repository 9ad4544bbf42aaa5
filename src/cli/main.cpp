#include <CLI/CLI.hpp>
#include <iostream>

#include "qkv/kernels/blas.hpp"

int main(int argc, char** argv) {
  CLI::App app{"qkv: train and study attention models"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Print the BLAS kernel and thread setup");
  info->callback([] { std::cout << qkv::kernels::blas_info() << "\n"; });
  CLI11_PARSE(app, argc, argv);
  return 0;
}
